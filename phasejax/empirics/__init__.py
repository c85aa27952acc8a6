"""Finite-size experiments: data generation (spec section 1)."""

from phasejax.empirics.data import TiedAttentionData, generate_data, overlaps_of, positional_directions

__all__ = ["TiedAttentionData", "generate_data", "overlaps_of", "positional_directions"]
