"""What the ``squall`` command does, one job per module (as Storm's ``org.apache.storm.command``):
:mod:`~squall.ops.command.topology_file` loads a topology file, :mod:`~squall.ops.command.overrides`
parses ``-c key=value`` and ``--conf spark.key=value`` (a ``--master`` URL is checked by
:mod:`squall.cluster.spark_master_url`), :mod:`~squall.ops.command.plan` describes a topology's layout and
links, :mod:`~squall.ops.command.serve` keeps a topology running until it is stopped and
:mod:`~squall.ops.command.report` formats its status line and summary. :mod:`squall.ops.cli` holds
the arguments and calls them."""


class UsageError(Exception):
    """The command cannot run as given (a bad file, argument or setting); the message says
    why, on one line. The command prints it and exits with status 2."""
