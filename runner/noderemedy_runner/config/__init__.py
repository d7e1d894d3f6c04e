"""The configuration formats users write: the remedy Configuration and the seed's fence ConfigMaps."""
