"""Tests of the storage array collectors against real sshd and local REST servers."""
