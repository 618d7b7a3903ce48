"""MCP over Streamable HTTP: the ASGI app in front of the SDK's session managers (``app``),
who may call it (``lambo_core.credentials``), the limits that protect the writer
(``limits``), and the serve that holds its sessions (``serve``). Spec: "Transports".
"""
