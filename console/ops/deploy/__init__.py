"""Deployments behind SGLang's gateway (issue 29): :mod:`.ops` (up, status, roll, down), :mod:`.gateway` (its
worker API), :mod:`.hostcall` (what runs on the host: the key file, HTTP calls, the gateway's launcher),
:mod:`.models` (what status and the operations return)."""
