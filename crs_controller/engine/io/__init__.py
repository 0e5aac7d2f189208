"""The engine's edge to the management cluster: informers (list + watch, parsed
once), Events, metrics, the referenced ConfigMaps and Secrets, and the writers that
cache what they wrote. Below everything else in the engine."""
