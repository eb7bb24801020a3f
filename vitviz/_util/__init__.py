"""Small helpers with no vitviz dependencies: arrays without torch, files, lazy package faces."""
