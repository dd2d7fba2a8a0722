"""`dtrun predict`: larger node counts' efficiency, step time and cost from a measured sweep or
a description of results measured elsewhere (docs/prediction.md)."""
