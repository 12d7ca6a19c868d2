"""The Textual UI. It reads only the store and the findings, never a collector."""
