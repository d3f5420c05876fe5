# The one image of docker-compose.yaml: Airflow 3.3 with this provider installed, Spark 4.2 (the pyspark
# wheel ships the Spark runtime: jars, bin/spark-class, bin/spark-submit) and a Java 17 JRE.
#
# The Airflow components and the Spark master and workers all run it. The Spark nodes cannot use the
# official apache/spark images: in client mode our hook sets spark.pyspark.python to the Airflow
# interpreter, and executors start Python workers with it (spark.createDataFrame does), which must exist
# on every worker and have the driver's Python minor version (3.11; the apache/spark images ship 3.10).
#
# Build context: the repository root (docker compose build, or
#   docker build -f docker/airflow.Dockerfile -t airflow-provider-wm:local .).
FROM apache/airflow:3.3.2-python3.11

USER root
# Java 17 JRE for spark-submit (the drivers run in the Airflow containers) and for the Spark master and
# workers. Copied from the official Temurin image so it does not depend on the Debian release underneath.
COPY --from=eclipse-temurin:17-jre /opt/java/openjdk /opt/java/openjdk
ENV JAVA_HOME=/opt/java/openjdk \
    PATH="/opt/java/openjdk/bin:${PATH}"

USER airflow
# Only what the package build needs (not .venv, build/ or caches of the working tree).
COPY --chown=airflow:0 pyproject.toml README.md /opt/airflow/src/airflow-provider-wm/
COPY --chown=airflow:0 airflow_provider_wm /opt/airflow/src/airflow-provider-wm/airflow_provider_wm
COPY --chown=airflow:0 spark_jobs /opt/airflow/src/airflow-provider-wm/spark_jobs
# The same pins as pyproject.toml: pyspark and pyspark-client install into one folder, so their versions
# must be equal. apache-airflow is pinned to the image's own version so pip never replaces it.
RUN pip install --no-cache-dir \
        "apache-airflow==${AIRFLOW_VERSION}" \
        "pyspark==4.2.0" \
        "pyspark-client==4.2.0" \
        /opt/airflow/src/airflow-provider-wm \
    && python -c "import pyspark, airflow_provider_wm, spark_jobs; assert pyspark.__version__ == '4.2.0', pyspark.__version__" \
    && python -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))" > /tmp/spark-home \
    && mkdir -p /opt/airflow/auth

USER root
# /opt/spark/bin/spark-class, as in the Spark distribution (docker-compose.yaml starts the nodes with it).
# /opt/wm is the mount point of the shared data volume: created here, owned by the airflow user, so a new
# named volume mounted on it starts with that owner (drivers and executors both run as airflow).
RUN ln -s "$(cat /tmp/spark-home)" /opt/spark \
    && rm /tmp/spark-home \
    && test -x /opt/spark/bin/spark-class \
    && java -version \
    && mkdir -p /opt/wm \
    && chown airflow:0 /opt/wm \
    && chmod 2775 /opt/wm

USER airflow
