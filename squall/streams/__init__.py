"""Storm's Streams API in Python: functional pipelines built into ordinary topologies.

    from squall.streams import StreamBuilder

    builder = StreamBuilder()
    (builder.new_stream(SentenceSpout())
        .flat_map(str.split)
        .map_to_pair(lambda word: (word, 1))
        .count_by_key()
        .print())
    LocalCluster().submit_topology("words", {}, builder.build())

See :mod:`squall.streams.builder` for how a pipeline becomes bolts (consecutive operations
fused into one bolt) and :mod:`squall.streams.operations` for what each operation emits.
"""

from squall.streams.builder import StreamBuilder
from squall.streams.operations import Aggregator, Count
from squall.streams.processor_bolt import ProcessorBolt, StreamOperationError
from squall.streams.stream import PairStream, Stream
from squall.streams.windows import SlidingWindows, TumblingWindows, Window

__all__ = [
    "Aggregator", "Count", "PairStream", "ProcessorBolt", "SlidingWindows", "Stream", "StreamBuilder",
    "StreamOperationError", "TumblingWindows", "Window",
]
