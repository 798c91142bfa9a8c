"""Human actions: permission-checked, audited, calling the engine.

Views, the API and management commands stay thin and call these. The engine
(`durableruns.engine`) never imports this package; it tells the outside world what
happened through its ports and signals (`engine.doorbell`, `engine.signals`).
"""
