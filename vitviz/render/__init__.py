"""vitviz.render: colour scales, colormaps and figure files. No Qt."""
