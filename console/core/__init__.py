"""Pure functions over models: classification, flags, sessions and the current session of a GPU, orphans,
events, metrics, the planner, the advisor, reports, the exporter's rendering, redaction and terminal text.
Never asyncio, subprocess, sockets, the link, ops, the UI or textual."""
