"""Start the project's real command with extra tools modules: `python launch_with_tools.py DIR [ARGS...]`.

The modules in DIR join the tools/ package the way an owner's files do. The command is the
project's (`sample_server.cli.main`), which tells the library which project it serves.
"""

import sys

import sample_server.tools
from sample_server.cli import main

sample_server.tools.__path__.append(sys.argv[1])
raise SystemExit(main(sys.argv[2:]))
