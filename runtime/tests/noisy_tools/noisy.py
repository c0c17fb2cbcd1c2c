"""A tools module that writes to stdout in every way a careless one does."""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys

from resilient_mcp import tool

print("NOISE import-time print, unflushed")
print("NOISE import-time print, flushed", flush=True)
sys.stdout.write("NOISE import-time sys.stdout.write\n")
atexit.register(lambda: print("NOISE print at exit"))
logging.basicConfig(stream=sys.stdout)  # a no-op when logging is configured: that is the point


@tool(read_only=True)
def chatty() -> str:
    """Prints in every way, then answers."""
    print("NOISE print in a tool, unflushed")
    os.write(1, b"NOISE os.write to fd 1\n")
    subprocess.run([sys.executable, "-c", "print('NOISE child process')"], check=True)
    logging.getLogger("noisy").warning("NOISE a log line")
    return "quiet answer"
