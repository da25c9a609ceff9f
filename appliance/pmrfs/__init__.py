"""PMRFS namenode: buckets, objects, blobs, replicas, placement, re-replication, GC."""
