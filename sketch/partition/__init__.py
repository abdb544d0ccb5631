"""The partition-clustered tree: per-case questions answered from the cases that can hold them.

=================  ==========================================================================
module             holds
=================  ==========================================================================
``index``          :class:`~sketch.partition.index.PartitionIndex`: the tree over the grouped layout
``columns``        the window columns the build hands over (local and Spark alike)
``arrays``         the layout's arrays from those columns (two counting sorts)
``answer``         candidates as groups, and the three answer modes on them
``files``          the layout and the tree as a dataset's files: built, written, their manifest entries
=================  ==========================================================================
"""
