"""airflow-provider-wm: watermark-driven pipelines on Spark for Apache Airflow.

This module stays import-light: the Spark jobs import ``airflow_provider_wm.core`` on machines without
Airflow, and Airflow imports ``get_provider_info`` while discovering providers.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def get_provider_info() -> dict[str, Any]:
    """Provider metadata for Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""
    integration = "Watermarks"
    return {
        "package-name": "airflow-provider-wm",
        "name": "Watermark-driven pipelines on Spark",
        "description": "Sensors, operators and state for watermark-driven pipelines on Apache Spark.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": integration,
                "external-doc-url": "https://github.com/airflow-provider-wm/airflow-provider-wm",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {
                "integration-name": integration,
                "python-modules": [
                    "airflow_provider_wm.hooks.watermark_store",
                    "airflow_provider_wm.hooks.spark_job",
                    "airflow_provider_wm.hooks.spark_submit",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": integration,
                "python-modules": [
                    "airflow_provider_wm.operators.controller_watermark",
                    "airflow_provider_wm.operators.incremental_partitions",
                    "airflow_provider_wm.operators.reader_time_window",
                    "airflow_provider_wm.operators.windowed_aggregate",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": integration,
                "python-modules": [
                    "airflow_provider_wm.sensors.stream_watermark",
                    "airflow_provider_wm.sensors.partition_watermark",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": integration,
                "python-modules": [
                    "airflow_provider_wm.triggers.watermark",
                    "airflow_provider_wm.triggers.partitions",
                    "airflow_provider_wm.triggers.watermark_advance",
                ],
            }
        ],
        "extra-links": ["airflow_provider_wm.links.WatermarksLink"],
        "config": {
            "wm": {
                "description": "The Watermarks page (airflow_provider_wm.plugins.watermarks).",
                "options": {
                    "store_path": {
                        "description": "Base path or fsspec URL of the watermark store the Watermarks page shows. "
                        "When unset, the page uses the wm_store_default connection.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/data/wm-store",
                        "default": None,
                    }
                },
            }
        },
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_wm.hooks.watermark_store.WatermarkStoreHook",
                "connection-type": "wm_store",
            }
        ],
    }
