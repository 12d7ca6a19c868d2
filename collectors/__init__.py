"""Collectors: one module or package per source. They yield samples and facts only."""
