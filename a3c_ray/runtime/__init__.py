"""The only code that imports Ray: actor shells, cluster connection and placement, the driver, metrics."""
