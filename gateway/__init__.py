"""The REST gateway: `xce gateway` serves `/xce/v1/` over HTTP for people, scripts and agents.

Stateless: every request becomes gRPC calls to the replicas with the caller's own API key (an identity
token), so the controllers authenticate, authorize and record that caller; the gateway holds no roles
and no keys. Pure parts (problems.py, forms.py, render.py) know nothing of HTTP servers; app.py wires
them to FastAPI and backend.py to the replicas.
"""
