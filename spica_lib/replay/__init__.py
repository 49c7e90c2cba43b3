"""Dynamo's offline replay: the deployment plan, the replay request and call, and the child process that runs it."""
