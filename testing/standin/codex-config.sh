# Sourced by with-standin.sh and scripts/try-real-cli.sh: the Codex provider entry that points
# Codex at the stand-in server. Usage: write_codex_config CODEX_HOME PORT
write_codex_config() {
  mkdir -p "$1"
  cat > "$1/config.toml" <<EOF2
model = "standin-model"
model_provider = "standin"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.standin]
name = "standin"
base_url = "http://127.0.0.1:$2/v1"
env_key = "STANDIN_API_KEY"
wire_api = "responses"
EOF2
}
