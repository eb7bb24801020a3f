"""vitviz.document: what the user looks at (session, appearance, comparison, the saved state). No Qt."""
