"""Tests of the optional capabilities, alone and together."""
