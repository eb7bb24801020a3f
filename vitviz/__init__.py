"""vitviz: see what a Vision Transformer looks at.

The public API here is Qt-free: models, capture, analysis, imaging. The GUI lives in ``vitviz.gui``.
"""

__version__ = "0.1.0"
