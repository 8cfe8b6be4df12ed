"""Offline admission: what the API server and the operator would say of a Nightshift
object, without a cluster (`nightshift validate`). Pure: files in, messages out."""
