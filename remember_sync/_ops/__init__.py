"""Operator logic behind the ``remember-sync`` command, as plain functions.

The command line (:mod:`remember_sync.cli`) only parses arguments and prints;
everything it does is here, so it can be tested and reused from a notebook
or a script:

* :mod:`~remember_sync._ops.context` -- opening a store, loading secrets;
* :mod:`~remember_sync._ops.walk` -- listing and decoding a whole store;
* :mod:`~remember_sync._ops.inspect` -- ``stats`` and ``doctor``;
* :mod:`~remember_sync._ops.transfer` -- ``export`` and ``import`` (JSON Lines);
* :mod:`~remember_sync._ops.rotate` -- ``rotate``;
* :mod:`~remember_sync._ops.demo` -- ``demo``.
"""
