"""Programs that run on the nodes. They import only torch and the standard library."""
