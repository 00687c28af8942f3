"""The cluster's client side: the channel to the leader, its transports, credentials, the cluster file."""
