"""Each screen's loader: what its `load_view` runs in the loader thread (store reads only, no widgets)."""
