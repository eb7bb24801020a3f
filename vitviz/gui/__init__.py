"""The desktop app (PySide6 + pyqtgraph): the only package that imports Qt."""
