"""Partitions as the commands use them, without ranks: the cache of made partitions, their simulated communication.

    cache.py      the partition cache of ``gnndist run`` (a key of every setting; made once, reused)
    simulate.py   ``gnndist simulate``: every layout's bytes, memory and time counted on the real partition
"""
