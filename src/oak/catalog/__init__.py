"""Application catalog: fitted throughput models and gradient-statistics curves, shipped as JSON.

``Catalog.load()`` reads the packaged catalog. Building from raw profiles lives in :mod:`oak.catalog.build`
(imported on demand: it needs scipy).
"""

from oak.catalog.schema import CATALOG_FORMAT_VERSION, AppProfile, Catalog, GpuProfile, ValidationCurves

__all__ = ["CATALOG_FORMAT_VERSION", "AppProfile", "Catalog", "GpuProfile", "ValidationCurves"]
