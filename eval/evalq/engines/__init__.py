"""What embeds or scores text: one module per backend, each declaring one ``BackendSpec``
listed in ``engines.registry``; HTTP clients, server launch, model info and
``engines.quantize`` (one module per method).

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
