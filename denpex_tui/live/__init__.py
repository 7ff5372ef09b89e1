"""Live engine source layer: follow files, directories, globs and commands; process
table; stall detection.  Domain core: no textual/rich imports here.

See docs/live-engine.md.
"""

from .execsource import ExecSource, parse_exec_spec
from .proctable import ProcessEvent, ProcessTable
from .dirwatch import DirWatch, classify_name
from .follower import FileFollower
from .sources import Chunk, SourceEvent
from .stall import StallCleared, StallDetector, StallEvent
from .pollwork import TokenBucket
from .tailer import Tailer, TailOptions

__all__ = [
    "Chunk",
    "DirWatch",
    "ExecSource",
    "FileFollower",
    "ProcessEvent",
    "ProcessTable",
    "SourceEvent",
    "StallCleared",
    "StallDetector",
    "StallEvent",
    "TailOptions",
    "Tailer",
    "TokenBucket",
    "classify_name",
    "parse_exec_spec",
]
