"""vitviz.batch: many images headless: inputs, export with its manifest, stats. No Qt."""
