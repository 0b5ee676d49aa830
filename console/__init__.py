"""mtpconsole: a terminal operator console for LLM inference servers on remote GPU hosts."""

__version__ = "0.1.0"
