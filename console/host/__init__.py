"""What runs on the host: the agent, the per-launch supervisor and their helpers. Every module here is
stdlib-only, runs on Python >= 3.8 and imports only its siblings (relatively): the whole folder is shipped
to each host (see ``console.link.protocol``) and imported by the console for the same constants."""
