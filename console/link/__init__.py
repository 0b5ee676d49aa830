"""The link to a host: the agent's wire protocol, the transports (asyncssh, a local subprocess) and the
:class:`~console.link.link.HostLink` that turns the agent's samples into snapshots. Imports host facts,
the models, errors and config, nothing above them."""
