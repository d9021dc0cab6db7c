"""lerodoc: prepare, convert, repair and train on LeRobot datasets."""

__version__ = "0.1.0"
