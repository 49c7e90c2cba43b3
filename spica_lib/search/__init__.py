"""The Vizier search, one round at a time: the branch's parameters, designers, projection, suggest and tell."""
