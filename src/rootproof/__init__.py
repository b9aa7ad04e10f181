"""rootproof: a harness for AI agents that diagnose production incidents.

The agent owns the reasoning; the harness owns the release. Nothing the agent cannot prove
with evidence recorded in this run reaches the user.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
