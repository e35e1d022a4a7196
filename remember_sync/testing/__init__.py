"""Helpers for testing applications (and this library) against real servers.

Nothing in the core imports this package.  It starts throw-away
``redis-server`` processes and clusters on free loopback ports and, in
:mod:`remember_sync.testing.kv_emulator`, an Upstash-REST emulator.
"""
