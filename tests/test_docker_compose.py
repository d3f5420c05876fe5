"""The Docker stack (``docker-compose.yaml`` + ``docker/airflow.Dockerfile``), checked without Docker.

Each test reads the files as Compose would (YAML anchors and merge keys resolved, ``${VAR:-default}``
interpolated with an empty environment, i.e. without a ``.env`` file) and checks one property of the
wiring: references resolve, versions agree with ``pyproject.toml``, and the Spark connections the Airflow
services get resolve, through the apache-spark provider's own ``SparkSubmitHook`` and ``SparkConnectHook``,
to the compose master (submit mode) and to the compose Spark Connect server (connect mode).
"""

from __future__ import annotations

import importlib.util
import re
import socket
import subprocess
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yaml"
PYPROJECT = REPO / "pyproject.toml"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
REQUIRED_AIRFLOW_ENV = (
    "AIRFLOW__CORE__EXECUTOR",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__CORE__AUTH_MANAGER",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    "AIRFLOW_CONN_SPARK_DEFAULT",
    "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
    "WM_SPARK_CONN_ID",
    "WM_EXAMPLE_BASE",
)
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
DEPENDS_ON_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
SPARK_CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
# spark-submit options that take no value (every other option takes the next word).
SPARK_SUBMIT_FLAGS = {"--verbose", "-v", "--supervise", "--help", "-h", "--version"}

_VARIABLE = re.compile(r"\$\$|\$\{(?P<braced>[A-Za-z_]\w*)(?P<default>:?-[^}]*)?\}|\$(?P<bare>[A-Za-z_]\w*)")


# ----------------------------------------------------------------------------------------------- helpers


def interpolate(value: Any) -> str:
    """Compose interpolation with no variables set: ``${VAR:-default}`` gives the default, ``$$`` a ``$``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group("default") is None:
            raise AssertionError(f"{match.group(0)!r} in {value!r} has no default: `docker compose up` needs a .env")
        return match.group("default").split("-", 1)[1]

    return _VARIABLE.sub(replace, str(value))


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: interpolate(value) for key, value in env.items() if value is not None}


def mounts(service: dict[str, Any]) -> list[dict[str, str]]:
    """``{"type": "volume"|"bind", "source", "target"}`` per entry of the service's ``volumes``."""
    result = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            result.append({"type": entry["type"], "source": entry.get("source", ""), "target": entry["target"]})
            continue
        parts = interpolate(entry).split(":")
        if len(parts) == 1:  # anonymous volume
            result.append({"type": "volume", "source": "", "target": parts[0]})
            continue
        source, target = parts[0], parts[1]
        kind = "bind" if source.startswith(("/", ".", "~")) else "volume"
        result.append({"type": kind, "source": source, "target": target})
    return result


def published_ports(service: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    """``(host_ip, host_port, container_port, protocol)`` for each port published on a fixed host port."""
    result = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            if entry.get("published") is not None:
                host_port = int(interpolate(entry["published"]))
                protocol = entry.get("protocol", "tcp")
                result.append((entry.get("host_ip", ""), host_port, int(entry["target"]), protocol))
            continue
        spec, _, protocol = interpolate(entry).partition("/")
        parts = spec.rsplit(":", 2)
        if len(parts) == 1:  # container port only: Docker picks a free host port
            continue
        host_ip = parts[0] if len(parts) == 3 else ""
        result.append((host_ip, int(parts[-2]), int(parts[-1]), protocol or "tcp"))
    return result


def dockerfile_of(service: dict[str, Any]) -> Path | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return REPO / build / "Dockerfile"
    return REPO / build.get("context", ".") / build.get("dockerfile", "Dockerfile")


def command_words(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(word) for word in command]


def healthcheck_text(service: dict[str, Any]) -> str:
    test = (service.get("healthcheck") or {}).get("test") or []
    return test if isinstance(test, str) else " ".join(test)


def spark_submit_arguments(words: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(options, confs)`` of a ``spark-submit`` command line (without the program): ``--master`` etc., and
    the ``--conf key=value`` pairs."""
    options: dict[str, str] = {}
    confs: dict[str, str] = {}
    remaining = iter(words)
    for word in remaining:
        assert word.startswith("-"), f"unexpected spark-submit argument {word!r} in {words}"
        if word in SPARK_SUBMIT_FLAGS:
            options[word] = ""
            continue
        option, _, value = word.partition("=")
        if not value:
            value = next(remaining, "")
        assert value, f"{option} has no value in {words}"
        if option in ("--conf", "-c"):
            key, _, conf_value = value.partition("=")
            confs[key] = conf_value
        else:
            options[option] = value
    return options, confs


def exact_pin(requirements: list[str], name: str, where: str) -> str:
    for line in requirements:
        requirement = Requirement(line)
        if requirement.name.lower() == name:
            specs = list(requirement.specifier)
            assert len(specs) == 1 and specs[0].operator == "==", f"{name} is not pinned exactly in {where}: {line}"
            return specs[0].version
    raise AssertionError(f"{name} is not a requirement in {where}")


def dockerfile_instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` per instruction, continuation lines joined, comments dropped."""
    lines = [line for line in dockerfile.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, arguments = line.strip().partition(" ")
            result.append((instruction.upper(), " ".join(arguments.split())))
    return result


def dockerfile_pin(dockerfile: Path, name: str) -> str:
    pins = re.findall(rf"(?<![\w.-]){re.escape(name)}==([0-9][\w.]*)", dockerfile.read_text())
    assert len(set(pins)) == 1, f"{dockerfile.name} should pin {name}==<version> exactly once, found {pins}"
    return pins[0]


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict) and isinstance(document.get("services"), dict), "no services mapping"
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def airflow_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    missing = [name for name in AIRFLOW_SERVICES if name not in services]
    assert not missing, f"Airflow services missing from docker-compose.yaml: {missing}"
    return {name: services[name] for name in AIRFLOW_SERVICES}


@pytest.fixture(scope="module")
def spark_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {
        name: service
        for name, service in services.items()
        if any(word.startswith("org.apache.spark.deploy.") for word in command_words(service))
    }
    masters = [n for n, s in found.items() if "org.apache.spark.deploy.master.Master" in command_words(s)]
    workers = [n for n, s in found.items() if "org.apache.spark.deploy.worker.Worker" in command_words(s)]
    assert masters == ["spark-master"] and len(workers) == 2, f"expected spark-master and two workers: {found}"
    return found


@pytest.fixture(scope="module")
def spark_connect(services: dict[str, dict[str, Any]]) -> dict[str, Any]:
    assert "spark-connect" in services, "no spark-connect service in docker-compose.yaml"
    return services["spark-connect"]


@pytest.fixture(scope="module")
def spark_connect_arguments(spark_connect: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    words = command_words(spark_connect)
    assert words and words[0] == "/opt/spark/bin/spark-submit", f"spark-connect does not run spark-submit: {words}"
    return spark_submit_arguments(words[1:])


@pytest.fixture(scope="module")
def master_url(spark_services: dict[str, dict[str, Any]]) -> str:
    master_env = environment(spark_services["spark-master"])
    return f"spark://{master_env['SPARK_MASTER_HOST']}:{master_env.get('SPARK_MASTER_PORT', '7077')}"


@pytest.fixture(scope="module")
def pyproject_dependencies() -> list[str]:
    return tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]


@pytest.fixture(scope="module")
def airflow_dockerfile(airflow_services: dict[str, dict[str, Any]]) -> Path:
    dockerfiles = {dockerfile_of(service) for service in airflow_services.values()}
    assert len(dockerfiles) == 1 and None not in dockerfiles, f"Airflow services must share one build: {dockerfiles}"
    return dockerfiles.pop()  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------- tests


def test_every_service_has_an_image_or_a_build_whose_dockerfile_exists(services):
    for name, service in services.items():
        assert "image" in service or "build" in service, f"{name} has neither image nor build"
        dockerfile = dockerfile_of(service)
        if dockerfile is not None:
            assert dockerfile.is_file(), f"{name} builds from {dockerfile}, which does not exist"


def test_named_volumes_and_networks_used_by_services_are_declared_and_every_declared_volume_is_used(compose, services):
    declared_volumes = set(compose.get("volumes") or {})
    declared_networks = set(compose.get("networks") or {}) | {"default"}
    used_volumes = set()
    for name, service in services.items():
        for mount in mounts(service):
            if mount["type"] == "volume" and mount["source"]:
                assert mount["source"] in declared_volumes, f"{name} mounts undeclared volume {mount['source']}"
                used_volumes.add(mount["source"])
            if mount["type"] == "bind":
                assert (REPO / mount["source"]).exists(), f"{name} bind-mounts missing path {mount['source']}"
        networks = service.get("networks") or []
        for network in networks if isinstance(networks, list) else list(networks):
            assert network in declared_networks, f"{name} joins undeclared network {network}"
    assert used_volumes == declared_volumes, f"declared but unused volumes: {declared_volumes - used_volumes}"


def test_depends_on_targets_are_services_and_service_healthy_targets_have_a_healthcheck(services):
    for name, service in services.items():
        depends_on = service.get("depends_on") or {}
        if isinstance(depends_on, list):
            depends_on = {target: {"condition": "service_started"} for target in depends_on}
        for target, spec in depends_on.items():
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name, f"{name} depends on itself"
            assert spec["condition"] in DEPENDS_ON_CONDITIONS, f"{name} -> {target}: {spec['condition']}"
            if spec["condition"] == "service_healthy":
                assert services[target].get("healthcheck"), f"{name} waits for {target} healthy: no healthcheck"


def test_airflow_services_wait_for_healthy_postgres_and_a_successful_airflow_init(airflow_services):
    for name, service in airflow_services.items():
        depends_on = service.get("depends_on") or {}
        assert depends_on.get("postgres", {}).get("condition") == "service_healthy", name
        if name != "airflow-init":
            init = depends_on.get("airflow-init", {}).get("condition")
            assert init == "service_completed_successfully", f"{name} does not wait for airflow-init: {init}"
    init_command = " ".join(command_words(airflow_services["airflow-init"]))
    assert "airflow db migrate" in init_command


def test_every_airflow_service_gets_the_same_airflow_configuration_with_valid_option_names(airflow_services):
    from airflow.configuration import conf

    options = conf.configuration_description
    envs = {name: environment(service) for name, service in airflow_services.items()}
    for name, env in envs.items():
        missing = [key for key in REQUIRED_AIRFLOW_ENV if not env.get(key)]
        assert not missing, f"{name} lacks {missing}"
        for key in env:
            if key.startswith("AIRFLOW__"):
                section, option = key.removeprefix("AIRFLOW__").lower().split("__", 1)
                assert option in options.get(section, {}).get("options", {}), f"{name}: no Airflow option {key}"
    shared = {key: {env[key] for env in envs.values()} for key in REQUIRED_AIRFLOW_ENV}
    assert all(len(values) == 1 for values in shared.values()), f"services disagree: {shared}"
    env = envs["airflow-scheduler"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__AUTH_MANAGER"] == SIMPLE_AUTH_MANAGER
    assert env["WM_SPARK_CONN_ID"] == "spark_connect_default"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://airflow-api-server:8080/")


def test_the_auth_manager_class_exists_in_the_installed_airflow_and_admin_is_an_admin(airflow_services):
    env = environment(airflow_services["airflow-api-server"])
    module, _, class_name = env["AIRFLOW__CORE__AUTH_MANAGER"].rpartition(".")
    spec = importlib.util.find_spec(module)  # the installed Airflow's source, not executed
    assert spec is not None and spec.origin, f"no module {module}"
    assert re.search(rf"^class {class_name}\b", Path(spec.origin).read_text(), flags=re.MULTILINE), class_name
    users = dict(user.split(":")[:2] for user in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(","))
    assert users.get("admin") == "admin", users


def test_the_passwords_file_is_on_a_volume_shared_by_airflow_init_and_the_api_server(airflow_services):
    passwords_file = environment(airflow_services["airflow-init"])["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]

    def volume_holding(service_name: str) -> str:
        for mount in mounts(airflow_services[service_name]):
            if mount["type"] == "volume" and passwords_file.startswith(mount["target"].rstrip("/") + "/"):
                return mount["source"]
        raise AssertionError(f"{passwords_file} is not on a named volume of {service_name}")

    assert volume_holding("airflow-init") == volume_holding("airflow-api-server")
    assert "SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in " ".join(command_words(airflow_services["airflow-init"]))


def test_the_default_fernet_key_is_a_valid_fernet_key_and_the_jwt_secret_is_not_empty(airflow_services):
    from cryptography.fernet import Fernet

    env = environment(airflow_services["airflow-scheduler"])
    fernet = Fernet(env["AIRFLOW__CORE__FERNET_KEY"].encode())
    assert fernet.decrypt(fernet.encrypt(b"wm")) == b"wm"
    assert len(env["AIRFLOW__API_AUTH__JWT_SECRET"]) >= 32


def test_sql_alchemy_conn_reaches_the_postgres_service_with_its_credentials(services, airflow_services):
    from sqlalchemy.engine import make_url

    url = make_url(environment(airflow_services["airflow-scheduler"])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    postgres = environment(services[url.host])
    assert url.drivername == "postgresql+psycopg2"
    assert services[url.host]["image"].startswith("postgres:15")
    assert (url.username, url.password, url.database) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
        postgres["POSTGRES_DB"],
    )
    assert url.port in (None, 5432)


def test_published_host_ports_do_not_clash(services):
    owners: dict[tuple[int, str], list[str]] = {}
    for name, service in services.items():
        for _, host_port, _, protocol in published_ports(service):
            owners.setdefault((host_port, protocol), []).append(name)
    clashes = {port: names for port, names in owners.items() if len(names) > 1}
    assert not clashes, f"host ports published twice: {clashes}"
    assert owners.get((8080, "tcp")) == ["airflow-api-server"], owners
    assert owners.get((15002, "tcp")) == ["spark-connect"], owners


def test_healthchecks_cover_postgres_the_api_server_and_the_spark_master_ui(services):
    assert "pg_isready" in healthcheck_text(services["postgres"])
    api_check = healthcheck_text(services["airflow-api-server"])
    assert "http://localhost:8080/api/v2/monitor/health" in api_check
    assert 8080 in {container for _, _, container, _ in published_ports(services["airflow-api-server"])}, (
        "the api-server's health port is not the port it publishes"
    )
    master = services["spark-master"]
    ui_port = int(environment(master).get("SPARK_MASTER_WEBUI_PORT", "8080"))
    assert f"http://localhost:{ui_port}/" in healthcheck_text(master)
    published = {container: host for _, host, container, _ in published_ports(master)}
    assert ui_port in published and published[ui_port] != 8080, f"master UI published as {published}"


def test_spark_nodes_run_the_spark_version_pinned_in_pyproject(spark_services, pyproject_dependencies):
    pinned = exact_pin(pyproject_dependencies, "pyspark", "pyproject.toml")
    for name, service in spark_services.items():
        dockerfile = dockerfile_of(service)
        if dockerfile is not None:
            version = dockerfile_pin(dockerfile, "pyspark")
        else:
            match = re.fullmatch(r"(?:docker\.io/)?apache/spark:(\d+\.\d+\.\d+)(?:-\S+)?", service.get("image", ""))
            assert match, f"{name}: cannot tell the Spark version of image {service.get('image')!r}"
            version = match.group(1)
        assert version == pinned, f"{name} runs Spark {version}, pyproject pins pyspark=={pinned}"


def test_dockerfile_pins_pyspark_and_pyspark_client_exactly_as_pyproject(airflow_dockerfile, pyproject_dependencies):
    for name in ("pyspark", "pyspark-client"):
        assert dockerfile_pin(airflow_dockerfile, name) == exact_pin(pyproject_dependencies, name, "pyproject.toml")


def test_dockerfile_base_is_the_pinned_airflow_version_on_the_projects_python(airflow_dockerfile):
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    airflow_pin = exact_pin(project["dependencies"], "apache-airflow", "pyproject.toml")
    bases = re.findall(r"^FROM\s+apache/airflow:(\S+)", airflow_dockerfile.read_text(), flags=re.MULTILINE)
    assert len(bases) == 1, f"expected one FROM apache/airflow:<tag>, found {bases}"
    match = re.fullmatch(r"(\d+\.\d+\.\d+)-python(\d+\.\d+)", bases[0])
    assert match, f"unexpected Airflow image tag {bases[0]}"
    assert match.group(1) == airflow_pin
    assert SpecifierSet(project["requires-python"]).contains(f"{match.group(2)}.0")


def test_dockerfile_provides_a_java_17_runtime_and_pip_installs_the_copied_repository(airflow_dockerfile):
    instructions = dockerfile_instructions(airflow_dockerfile)
    text = " ".join(arguments for _, arguments in instructions)
    assert re.search(r"eclipse-temurin:17-jre\b|openjdk-17-jre", text), "no Java 17 JRE in the image"
    assert any(i == "ENV" and "JAVA_HOME=" in a for i, a in instructions), "JAVA_HOME is not set"
    copies = [a.split() for i, a in instructions if i == "COPY" and "--from=" not in a]  # from the context
    sources = {word for words in copies for word in words[:-1] if not word.startswith("--")}
    assert {"pyproject.toml", "README.md", "airflow_provider_wm", "spark_jobs"} <= sources, sources
    assert all((REPO / source).exists() for source in sources), sources
    source_dir = next(words[-1] for words in copies if "pyproject.toml" in words).rstrip("/")
    pip_runs = [
        arguments for instruction, arguments in instructions if instruction == "RUN" and "pip install" in arguments
    ]
    assert any(re.search(rf"{re.escape(source_dir)}(\s|$)", run) for run in pip_runs), f"{source_dir} is not installed"


def test_spark_nodes_run_the_airflow_image_so_executors_find_the_drivers_python(airflow_services, spark_services):
    airflow_images = {(s.get("image"), dockerfile_of(s)) for s in airflow_services.values()}
    spark_images = {(s.get("image"), dockerfile_of(s)) for s in spark_services.values()}
    assert len(airflow_images) == 1 and spark_images == airflow_images, (airflow_images, spark_images)
    for name, service in spark_services.items():
        assert command_words(service)[0] == "/opt/spark/bin/spark-class", name
        # The Airflow entrypoint would run any other command as `airflow <command>`.
        assert service.get("entrypoint"), f"{name} runs spark-class through the Airflow entrypoint"


def test_spark_default_connection_resolves_to_the_compose_master_through_spark_submit_hook(
    airflow_services, spark_services, master_url, monkeypatch
):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    assert master_url == "spark://spark-master:7077"
    conn_id = "spark_default"  # submit mode: not WM_SPARK_CONN_ID (connect mode), but still defined
    value = environment(airflow_services["airflow-scheduler"])[f"AIRFLOW_CONN_{conn_id.upper()}"]
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value)
    resolved = SparkSubmitHook(conn_id=conn_id)._connection
    # A connection Airflow cannot find would silently resolve to "yarn".
    assert resolved["master"] == master_url
    assert resolved["deploy_mode"] is None  # client mode: the driver runs in the Airflow container
    for name, service in spark_services.items():
        if "org.apache.spark.deploy.worker.Worker" in command_words(service):
            assert command_words(service)[-1] == master_url, f"{name} registers with {command_words(service)[-1]}"
            assert service["depends_on"]["spark-master"]["condition"] == "service_healthy", name


def test_the_shared_data_volume_is_mounted_at_wm_example_base_in_airflow_and_spark_services(
    airflow_services, spark_services, spark_connect
):
    base = environment(airflow_services["airflow-scheduler"])["WM_EXAMPLE_BASE"]
    sources = set()
    # spark-connect too: in connect mode its driver reads and writes the paths the tasks pass it.
    for name, service in {**airflow_services, **spark_services, "spark-connect": spark_connect}.items():
        at_base = [m for m in mounts(service) if m["target"].rstrip("/") == base.rstrip("/")]
        assert len(at_base) == 1 and at_base[0]["type"] == "volume", f"{name} does not mount a volume at {base}"
        sources.add(at_base[0]["source"])
    assert len(sources) == 1, f"different volumes at {base}: {sources}"


def test_the_example_dags_are_mounted_into_the_airflow_dags_folder(airflow_services):
    for name, service in airflow_services.items():
        dag_mounts = [m for m in mounts(service) if m["target"] == "/opt/airflow/dags"]
        assert len(dag_mounts) == 1 and dag_mounts[0]["type"] == "bind", f"{name}: {dag_mounts}"
        dags = (REPO / dag_mounts[0]["source"]).resolve()
        assert dags == REPO / "dags" and (dags / "example_incremental_partitions.py").is_file(), name


def test_spark_connect_runs_the_spark_workers_image_with_spark_submit_outside_the_airflow_entrypoint(
    spark_services, spark_connect
):
    # Its executors run on the workers: the same image, so the same Python for UDFs and the same Spark.
    workers = [s for s in spark_services.values() if "org.apache.spark.deploy.worker.Worker" in command_words(s)]
    worker_images = {(s.get("image"), dockerfile_of(s)) for s in workers}
    assert worker_images == {(spark_connect.get("image"), dockerfile_of(spark_connect))}, worker_images
    assert spark_connect.get("entrypoint"), "spark-connect runs spark-submit through the Airflow entrypoint"
    assert spark_connect.get("restart") == workers[0].get("restart") == "always"
    # The image links /opt/spark to the installed pyspark package, which ships bin/spark-submit.
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin
    assert (Path(spec.origin).parent / "bin" / "spark-submit").is_file()


def test_spark_connect_runs_the_connect_server_against_the_compose_master_on_all_interfaces_port_15002(
    spark_connect, spark_connect_arguments, master_url
):
    options, confs = spark_connect_arguments
    assert options.get("--class") == SPARK_CONNECT_SERVER
    assert options.get("--master") == master_url == "spark://spark-master:7077"
    assert confs.get("spark.connect.grpc.binding.address") == "0.0.0.0"  # reachable from other containers
    assert confs.get("spark.connect.grpc.binding.port") == "15002"
    assert "--deploy-mode" not in options or options["--deploy-mode"] == "client", "the server must run here"
    condition = (spark_connect.get("depends_on") or {}).get("spark-master", {}).get("condition")
    assert condition in ("service_healthy", "service_started"), f"spark-connect -> spark-master: {condition}"


def test_the_spark_connect_server_jar_of_the_pinned_pyspark_is_in_the_installed_pyspark(pyproject_dependencies):
    pinned = exact_pin(pyproject_dependencies, "pyspark", "pyproject.toml")
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin
    jar = Path(spec.origin).parent / "jars" / f"spark-connect_2.13-{pinned}.jar"
    assert jar.is_file(), f"{jar} is missing: the server class cannot load"
    with zipfile.ZipFile(jar) as archive:
        assert SPARK_CONNECT_SERVER.replace(".", "/") + ".class" in archive.namelist()


def test_spark_connect_healthcheck_probes_the_grpc_port_and_detects_a_listener(spark_connect, spark_connect_arguments):
    port = spark_connect_arguments[1]["spark.connect.grpc.binding.port"]
    test = spark_connect["healthcheck"]["test"]
    assert test[0] == "CMD" and port in " ".join(test[1:]), f"healthcheck does not probe port {port}: {test}"
    published = {container: host for _, host, container, _ in published_ports(spark_connect)}
    assert published.get(int(port)) == int(port), f"the gRPC port is published as {published}"

    # The probe itself, run here against a free port instead of the server's.
    def probe(on_port: int) -> int:
        command = [word.replace(port, str(on_port)) for word in test[1:]]
        return subprocess.run(command, capture_output=True, timeout=10, check=False).returncode

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        free_port = listener.getsockname()[1]
        assert probe(free_port) == 0, "the healthcheck fails against a listening port"
    assert probe(free_port) != 0, "the healthcheck passes with nothing listening"


def test_the_scheduler_which_runs_the_tasks_waits_for_a_healthy_spark_connect(airflow_services):
    assert environment(airflow_services["airflow-scheduler"])["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    depends_on = airflow_services["airflow-scheduler"].get("depends_on") or {}
    assert depends_on.get("spark-connect", {}).get("condition") == "service_healthy", depends_on


def test_spark_connect_default_connection_resolves_to_the_compose_server_through_spark_connect_hook(
    airflow_services, spark_connect_arguments, monkeypatch
):
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk import Connection

    env = environment(airflow_services["airflow-scheduler"])
    conn_id = env["WM_SPARK_CONN_ID"]
    assert conn_id == SparkConnectHook.default_conn_name == "spark_connect_default"
    value = env[f"AIRFLOW_CONN_{conn_id.upper()}"]
    connection = Connection(conn_id=conn_id, uri=value)
    port = int(spark_connect_arguments[1]["spark.connect.grpc.binding.port"])
    assert (connection.conn_type, connection.host, connection.port) == (
        SparkConnectHook.conn_type,
        "spark-connect",
        port,
    )
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value)
    assert SparkConnectHook(conn_id=conn_id).get_connection_url() == f"sc://spark-connect:{port}/"
