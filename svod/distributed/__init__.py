"""svod on Ray: a saved plan (``plan.save``) run once per shard of its inputs on Ray actors.

::

    Cluster(num_cpus=2)              a local Ray when none is running (ray.init), or the one that is
    cluster.map_plan(bundle, shards) each actor owns one svod device and loads the bundle once, then runs
                                     the plan on the shards it is given; outputs come back in shard order

Ray is an optional dependency (the ``ray`` extra): ``import svod.distributed`` works without it, and
``Cluster`` raises ``SvodError`` saying how to install it.
"""

from svod.distributed.cluster import Cluster, map_plan

__all__ = ["Cluster", "map_plan"]
