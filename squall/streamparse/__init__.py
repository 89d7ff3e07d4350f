"""Run streamparse / pystorm topologies in Squall, unchanged (``squall run topologies/NAME.py``
inside a project made by ``sparse quickstart NAME``): :mod:`squall.streamparse.project` finds
the project, :mod:`squall.streamparse.topology` converts its ``streamparse.Topology`` (needs
the ``streamparse`` package), :mod:`squall.streamparse.pystorm_adapter` runs its Python
components natively."""
