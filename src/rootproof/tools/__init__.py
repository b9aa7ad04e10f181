"""Evidence tools and their backends."""
