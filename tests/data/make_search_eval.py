"""Writes search_eval.json: memories of the kinds agents keep, and questions about them.

The memories are hand-written facts, preferences and project notes, plus
generated tool caches and tickets (the noise a real namespace holds).  Each
question is phrased differently from the text it should find and lists the
keys that answer it.  Run ``python tests/data/make_search_eval.py`` to rewrite
the JSON after editing this file.
"""

from __future__ import annotations

import json
from pathlib import Path

# (key, value, brand)
FACTS = [
    ("user_name", "Her name is Margaret Okafor, she goes by Maggie", "state"),
    ("user_birthday", "Born on 14 March 1988", "state"),
    ("home_city", "Lives in Porto, Portugal, near the Ribeira district", "state"),
    ("spouse", "Married to Daniel, who works as a nurse", "state"),
    ("kids", {"children": ["Ada (7)", "Tomás (4)"], "school": "Escola Básica da Foz"}, "state"),
    ("pet", "Has a grey cat called Pixel", "state"),
    ("employer", "Works at Lumen Analytics as a staff data engineer", "state"),
    ("manager", "Her boss is Priya Raman, VP of Data", "state"),
    ("timezone", "Europe/Lisbon (UTC+0, UTC+1 in summer)", "preference"),
    ("working_hours", "Usually online 08:30-17:00, never schedule anything on Friday afternoons",
     "preference"),
    ("coffee", "Drinks oat flat whites, no sugar", "preference"),
    ("diet", "Pescatarian; avoids red meat and pork", "preference"),
    ("allergies", "Severe allergy to tree nuts, especially cashews", "state"),
    ("languages_spoken", "Speaks English, Portuguese and some Yoruba", "state"),
    ("reply_style", "Keep answers short, bullet points preferred, no emojis", "preference"),
    ("code_style", "Prefers type hints everywhere and black formatting with line length 100",
     "preference"),
    ("editor", "Uses Neovim with the LazyVim distribution", "preference"),
    ("shell", "zsh with starship prompt", "preference"),
    ("ui_theme", {"appearance": "dark", "accent": "teal", "font_size": 15}, "preference"),
    ("music", "Listens to Afrobeat and jazz while coding, Fela Kuti is a favourite", "preference"),
    ("reading", "Currently reading 'The Dispossessed' by Ursula K. Le Guin", "state"),
    ("running", "Training for the Porto half marathon in November; runs 4 times a week",
     "state"),
    ("doctor", "GP is Dr. Sousa at the Boavista clinic, phone +351 22 600 1234", "state"),
    ("medication", "Takes cetirizine daily during spring for hay fever", "state"),
    ("car", "Drives a 2019 Renault Zoe (electric)", "state"),
    ("travel_next", "Flying to Lagos on 2 December for her sister's wedding", "state"),
    ("hotel_pref", "Likes boutique hotels, quiet room away from the elevator", "preference"),
    ("seat_pref", "Aisle seat on flights, never middle", "preference"),
    ("budget_monthly", "Household budget target: 3,200 EUR per month", "state"),
    ("anniversary", "Wedding anniversary is 22 August", "state"),
    ("sister", "Sister Ngozi lives in Lagos and is a pharmacist", "state"),
    ("gym", "Goes to a CrossFit box on Tuesdays and Thursdays at 7am", "state"),
    ("podcast", "Enjoys the 'Data Engineering Podcast' and 'Hardcore History'", "preference"),
    ("news", "Does not want political news in summaries", "preference"),
    ("gift_ideas", "For Daniel: vinyl records, especially old bossa nova", "state"),
    ("email_work", "margaret.okafor@lumen-analytics.example", "state"),
    ("phone", "+351 912 345 678", "state"),
    ("address", "Rua do Ouro 120, 4150-000 Porto", "state"),
    ("wifi", "Home network is called Okafor-5G", "state"),
    ("plants", "Keeps a fiddle-leaf fig and three succulents; water the fig every Sunday",
     "state"),
    ("sleep", "Goes to bed around 23:00, wakes at 6:15", "state"),
    ("learning", "Learning Rust in the evenings, working through the Rustlings exercises",
     "state"),
    ("charity", "Donates monthly to Médecins Sans Frontières", "state"),
    ("holiday_pref", "Prefers hiking holidays in the mountains over beach resorts", "preference"),
    ("restaurant_fav", "Favourite restaurant is Cantinho do Avillez, book a week ahead",
     "preference"),
    ("calendar_tool", "Uses Google Calendar for work and a paper planner for personal things",
     "state"),
    ("password_manager", "Uses 1Password; never paste secrets into chat", "preference"),
    ("bank", "Banks with Millennium BCP", "state"),
    ("tax", "Files Portuguese IRS in April with help from accountant Rui", "state"),
    ("volunteer", "Mentors at Django Girls Porto twice a year", "state"),
]

PROJECT = [
    ("proj_atlas_overview", "Project Atlas: migrate the nightly ETL from Airflow 1 to Dagster",
     "state"),
    ("proj_atlas_deadline", "Atlas cut-over must be finished before 31 January", "state"),
    ("proj_atlas_db", "Atlas warehouse is Snowflake; staging tables live in the RAW schema",
     "state"),
    ("proj_atlas_owner", "Atlas tech lead is Kwame; product owner is Lena", "state"),
    ("proj_atlas_risk", "Biggest risk: the billing DAG has undocumented side effects", "state"),
    ("deploy_process", "Deployments go through GitHub Actions, then Argo CD syncs to the "
     "production Kubernetes cluster", "state"),
    ("deploy_freeze", "No releases between 20 December and 3 January", "state"),
    ("oncall", "On-call rotation is weekly, handover on Mondays at 10:00", "state"),
    ("incident_2024_07", "July outage: the Kafka consumer lag alert fired because a "
     "partition rebalance looped; fixed by pinning the client version", "state"),
    ("ci_flaky", "The integration test test_orders_sync is flaky on CI; rerun before "
     "investigating", "state"),
    ("repo_layout", "Monorepo: services/ for Go services, pipelines/ for Python jobs, infra/ "
     "for Terraform", "state"),
    ("python_version", "Pipelines run on Python 3.11; do not use 3.12-only syntax", "state"),
    ("lint_rules", "ruff with the default rules plus isort; mypy strict on pipelines/",
     "preference"),
    ("review_rule", "Every PR needs two approvals, one from the owning team", "state"),
    ("branch_naming", "Branches are named <ticket>-<short-description>, e.g. DATA-142-fix-dedup",
     "preference"),
    ("db_prod_conn", {"host": "warehouse.internal", "port": 5432, "database": "analytics",
                      "note": "read-only replica for ad-hoc queries"}, "state"),
    ("dashboard", "The revenue dashboard is in Looker, folder 'Finance / Weekly'", "state"),
    ("slo", "Pipeline SLO: data fresh by 06:00 Lisbon time on 99% of days", "state"),
    ("cost_alert", "Snowflake spend alert at 8,000 USD per month", "state"),
    ("meeting_standup", "Daily stand-up at 09:45 on Google Meet", "state"),
    ("meeting_retro", "Retrospective every second Thursday at 15:00", "state"),
    ("tech_debt", "Replace the hand-rolled retry decorator with tenacity", "state"),
    ("feature_flag", "New dedup logic is behind the flag dedup_v2, enabled for 10% of tenants",
     "state"),
    ("api_rate_limit", "The partner API allows 600 requests per minute per key", "state"),
    ("secrets_location", "Service credentials live in Vault under kv/data/pipelines", "state"),
    ("log_search", "Logs are in Grafana Loki; use the label app=pipelines", "state"),
    ("postmortem_template", "Post-mortems use the blameless template in Confluence DATA space",
     "state"),
    ("customer_acme", "ACME Corp is the largest customer; their data lands at 02:00 UTC",
     "state"),
    ("sla_acme", "ACME contract: reports delivered within 4 hours of data arrival", "state"),
    ("interview_loop", "Interviews: one system design, one SQL exercise, one culture chat",
     "state"),
    ("hiring", "Hiring two senior data engineers this quarter", "state"),
    ("okr_q3", "Q3 objective: cut pipeline runtime by 30%", "state"),
    ("vendor_eval", "Evaluating Fivetran versus Airbyte for SaaS ingestion", "state"),
    ("docs_site", "Internal docs are built with MkDocs and published to docs.internal", "state"),
    ("backup_policy", "Warehouse backups: daily snapshots kept for 35 days", "state"),
    ("gdpr", "Personal data must be deleted within 30 days of an erasure request", "state"),
    ("perf_tip", "For big joins, cluster the orders table by tenant_id first", "state"),
    ("dev_env", "Local development uses docker compose with the dev profile", "state"),
    ("k8s_namespace", "Pipelines run in the Kubernetes namespace data-prod", "state"),
    ("alert_channel", "Alerts go to the Slack channel #data-alerts", "state"),
]

CONVERSATION = [
    ("conv_last_topic", "Last time we discussed how to backfill three months of orders data",
     "conversation"),
    ("conv_open_question", "She asked for a comparison of Parquet and Avro for the event "
     "archive; not answered yet", "conversation"),
    ("conv_todo_1", "Remind her to renew the passport before the Lagos trip", "conversation"),
    ("conv_todo_2", "Draft the Q3 OKR update email for Priya", "conversation"),
    ("conv_decision", "Decided to keep dbt for transformations and only move orchestration",
     "conversation"),
    ("conv_feedback", "She found the last summary too long and too formal", "conversation"),
    ("conv_joke", "Running joke: the billing DAG is 'the haunted house'", "conversation"),
    ("conv_followup", "Follow up on whether Kwame reviewed the Dagster sensor design",
     "conversation"),
]

APPROVALS = [
    ("approve_calendar_write", {"granted": True, "what": "create calendar events"}, "approval"),
    ("approve_email_send", {"granted": False, "what": "send emails on her behalf"}, "approval"),
]

CITIES = ["Lisbon", "Porto", "Lagos", "Berlin", "Madrid", "Paris", "London", "Nairobi",
          "Toronto", "Tokyo", "Sydney", "Boston", "Denver", "Oslo", "Rome", "Dublin"]
CURRENCIES = ["EUR", "USD", "GBP", "NGN", "JPY", "CAD", "AUD", "NOK", "CHF", "KES"]
TICKET_TOPICS = [
    "dedup job runs twice after daylight saving change",
    "Looker tile shows stale revenue numbers",
    "schema drift in the partner events feed",
    "slow query on customer_sessions",
    "Terraform plan wants to recreate the bucket",
    "missing tenant_id in 0.3% of orders",
    "Dagster sensor misses late files",
    "upgrade pandas to 2.2",
    "document the billing DAG",
    "rotate the partner API key",
    "Kafka topic retention too short for replays",
    "alert noise from the freshness check",
]


def generated() -> list[tuple[str, object, str]]:
    """Tool caches and tickets: what fills a real namespace besides the facts."""
    out: list[tuple[str, object, str]] = []
    for i, city in enumerate(CITIES):
        out.append((f"cache:weather:{city.lower()}", {
            "city": city, "temp_c": 8 + (i * 3) % 22, "conditions": ["rain", "sun", "cloud"][i % 3],
            "fetched": f"2026-11-{10 + i % 18:02d}T06:00Z"}, "cache"))
        out.append((f"cache:geocode:{city.lower()}", {
            "query": city, "lat": round(10 + i * 3.7, 4), "lon": round(-8 + i * 5.3, 4)}, "cache"))
    for i, cur in enumerate(CURRENCIES):
        out.append((f"cache:fx:EUR-{cur}", {"pair": f"EUR/{cur}", "rate": round(0.8 + i * 0.37, 4),
                                            "source": "ecb"}, "cache"))
    for i, topic in enumerate(TICKET_TOPICS):
        n = 100 + i * 7
        out.append((f"ticket:DATA-{n}", {"title": topic, "status": ["open", "in progress",
                    "done"][i % 3], "assignee": ["maggie", "kwame", "lena"][i % 3]}, "state"))
    for i in range(40):
        out.append((f"cache:search:{i:03d}", {
            "query": f"pipeline run {i}", "hits": [f"run-{i}-{j}" for j in range(3)]}, "cache"))
    for i in range(30):
        out.append((f"state:step:{i:03d}", {"step": i, "status": "ok" if i % 4 else "retry",
                                            "duration_ms": 120 + i * 11}, "state"))
    for i in range(24):
        day = f"2026-10-{i + 1:02d}"
        out.append((f"log:daily:{day}", f"Pipeline finished at 05:{10 + i:02d}, {1000 + i * 37} "
                                        "rows loaded", "cache"))
    for i in range(30):
        out.append((f"tool:github:pr:{400 + i}", {"repo": "lumen/pipelines", "number": 400 + i,
                    "title": f"chore: bump dependency group {i}", "merged": i % 2 == 0},
                    "cache"))
    return out


QUESTIONS = [
    ("what is the user called", ["user_name"]),
    ("when is her birthday", ["user_birthday"]),
    ("which town does she live in", ["home_city", "address"]),
    ("who is she married to", ["spouse"]),
    ("how many children does she have and how old are they", ["kids"]),
    ("does she have any animals", ["pet"]),
    ("where does she work", ["employer"]),
    ("who does Maggie report to", ["manager"]),
    ("what time zone is she in", ["timezone"]),
    ("when should I avoid booking meetings", ["working_hours"]),
    ("how does she take her coffee", ["coffee"]),
    ("does she eat meat", ["diet"]),
    ("is she allergic to anything", ["allergies"]),
    ("which languages can she speak", ["languages_spoken"]),
    ("how should I format my replies", ["reply_style"]),
    ("python formatting preferences", ["code_style", "lint_rules"]),
    ("which text editor does she use", ["editor"]),
    ("dark mode or light mode", ["ui_theme"]),
    ("what music does she like", ["music"]),
    ("what book is she reading now", ["reading"]),
    ("is she training for a race", ["running"]),
    ("who is her family doctor", ["doctor"]),
    ("what medicine does she take", ["medication"]),
    ("what car does she drive", ["car"]),
    ("upcoming trip to Nigeria", ["travel_next"]),
    ("what kind of hotel room does she want", ["hotel_pref"]),
    ("window or aisle seat", ["seat_pref"]),
    ("monthly household spending limit", ["budget_monthly"]),
    ("when is the wedding anniversary", ["anniversary"]),
    ("what does her sister do", ["sister"]),
    ("when does she go to the gym", ["gym"]),
    ("podcasts she listens to", ["podcast"]),
    ("topics to leave out of news summaries", ["news"]),
    ("present ideas for her husband", ["gift_ideas"]),
    ("her work email address", ["email_work"]),
    ("mobile number", ["phone"]),
    ("postal address", ["address"]),
    ("name of the home wifi", ["wifi"]),
    ("how often to water the plants", ["plants"]),
    ("what time does she wake up", ["sleep"]),
    ("which programming language is she learning", ["learning"]),
    ("which charity does she support", ["charity"]),
    ("beach or mountains for vacation", ["holiday_pref"]),
    ("favorite place to eat out", ["restaurant_fav"]),
    ("which calendar app", ["calendar_tool"]),
    ("where are her passwords kept", ["password_manager"]),
    ("who helps with taxes", ["tax"]),
    ("volunteering", ["volunteer"]),
    ("what is project atlas about", ["proj_atlas_overview"]),
    ("atlas due date", ["proj_atlas_deadline"]),
    ("which data warehouse does atlas use", ["proj_atlas_db"]),
    ("who leads atlas", ["proj_atlas_owner"]),
    ("what could go wrong with the migration", ["proj_atlas_risk"]),
    ("how do we ship to production", ["deploy_process"]),
    ("can we release over the holidays", ["deploy_freeze"]),
    ("when is the on-call handover", ["oncall"]),
    ("what caused the kafka outage last summer", ["incident_2024_07"]),
    ("a test keeps failing randomly in CI", ["ci_flaky"]),
    ("where is the terraform code", ["repo_layout"]),
    ("which python version for the pipelines", ["python_version"]),
    ("type checking and linting setup", ["lint_rules"]),
    ("how many reviewers does a pull request need", ["review_rule"]),
    ("how should I name a git branch", ["branch_naming"]),
    ("connection details for the analytics database", ["db_prod_conn"]),
    ("where is the revenue report", ["dashboard"]),
    ("freshness target for the data", ["slo"]),
    ("snowflake budget warning", ["cost_alert"]),
    ("what time is the daily standup", ["meeting_standup"]),
    ("when are retros", ["meeting_retro"]),
    ("retry helper cleanup", ["tech_debt"]),
    ("is the new deduplication turned on", ["feature_flag"]),
    ("partner api throttling", ["api_rate_limit"]),
    ("where are credentials stored", ["secrets_location", "password_manager"]),
    ("how to search the logs", ["log_search"]),
    ("incident writeup template", ["postmortem_template"]),
    ("when does acme data arrive", ["customer_acme"]),
    ("acme delivery deadline in the contract", ["sla_acme"]),
    ("what are the interview stages", ["interview_loop"]),
    ("how many engineers are we hiring", ["hiring"]),
    ("third quarter goal", ["okr_q3"]),
    ("ingestion tool comparison", ["vendor_eval"]),
    ("how are internal docs built", ["docs_site"]),
    ("how long are backups retained", ["backup_policy"]),
    ("deadline for deleting personal data", ["gdpr"]),
    ("speed up large joins", ["perf_tip"]),
    ("how to run things locally", ["dev_env"]),
    ("kubernetes namespace for pipelines", ["k8s_namespace"]),
    ("where do alerts get posted", ["alert_channel"]),
    ("what did we talk about last time", ["conv_last_topic"]),
    ("unanswered question about file formats", ["conv_open_question"]),
    ("passport renewal reminder", ["conv_todo_1"]),
    ("email to draft for her manager", ["conv_todo_2"]),
    ("are we keeping dbt", ["conv_decision"]),
    ("feedback on my summaries", ["conv_feedback", "reply_style"]),
    ("nickname for the billing pipeline", ["conv_joke"]),
    ("did kwame review the sensor design", ["conv_followup"]),
    ("may I create calendar events", ["approve_calendar_write"]),
    ("am I allowed to send email for her", ["approve_email_send"]),
    ("weather in berlin", ["cache:weather:berlin"]),
    ("euro to pound exchange rate", ["cache:fx:EUR-GBP"]),
    ("coordinates of nairobi", ["cache:geocode:nairobi"]),
    ("ticket about terraform recreating a bucket", ["ticket:DATA-128"]),
    ("is the pandas upgrade done", ["ticket:DATA-149"]),
    ("stale numbers in looker", ["ticket:DATA-107", "dashboard"]),
]


def build() -> dict[str, object]:
    memories = [
        {"key": k, "value": v, "brand": b, "scope": "user"}
        for k, v, b in FACTS + PROJECT + CONVERSATION + APPROVALS + generated()
    ]
    keys = {m["key"] for m in memories}
    for query, relevant in QUESTIONS:
        missing = set(relevant) - keys
        assert not missing, (query, missing)
    return {
        "description": (
            "Memories an assistant keeps for one user (facts, preferences, project notes, "
            "conversation notes, approvals, tool caches) and questions phrased differently "
            "from the stored text, each with the keys that answer it."
        ),
        "memories": memories,
        "questions": [{"query": q, "relevant": r} for q, r in QUESTIONS],
    }


if __name__ == "__main__":
    out = Path(__file__).with_name("search_eval.json")
    out.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
