"""An evaluation set for search by meaning: one person's memories, questions, paraphrases.

Each memory comes with a *question* reworded from it (it may share words with the
memory) and a *paraphrase* that shares no indexed word with the memory's key or
value (checked by ``tests/test_search_meaning.py``): only meaning connects them.
Generated distractors (tool caches, tickets) are the noise a real namespace holds.
Written for this project by hand, not taken from any other set.
"""

from __future__ import annotations

from typing import Any

# (key, value, reworded question, paraphrase sharing no word with key or value)
ITEMS: list[tuple[str, Any, str, str]] = [
    ("peanut_allergy", "Severe peanut allergy; carries an EpiPen",
     "does he have a peanut allergy", "any dietary restrictions before ordering food"),
    ("wife", "Married to Sofia, a cardiologist", "who is he married to",
     "what does his spouse do for a living"),
    ("daughter", "Daughter Lina is 6 and loves dinosaurs", "how old is his daughter Lina",
     "tell me about his child"),
    ("dog", "Has a border collie named Biscuit", "what is the name of his collie",
     "which pet animal lives with him"),
    ("hometown", "Grew up in Gdansk on the Baltic coast", "where did he grow up",
     "which city was his childhood home"),
    ("current_city", "Lives in Montreal since 2019", "which city does he live in now",
     "where is his residence"),
    ("job_title", "Senior backend engineer at Northwind Logistics", "what is his job title",
     "what kind of work does he do"),
    ("boss", "Reports to Hannah Ito, head of platform", "who does he report to",
     "who is his manager"),
    ("salary", "Base pay 142,000 CAD a year", "what is his base pay",
     "how much money does he earn"),
    ("birthday", "Born 3 May 1990", "when was he born",
     "what day should we celebrate his arrival in the world"),
    ("coffee_order", "Double espresso, no milk", "how does he take his espresso",
     "what caffeine drink should I get him"),
    ("vegetarian", "Vegetarian since 2015, eats eggs and cheese",
     "is he vegetarian", "does he avoid meat"),
    ("favorite_band", "Favourite band is Radiohead", "what is his favourite band",
     "which musicians does he enjoy most"),
    ("guitar", "Plays classical guitar every evening", "what instrument does he play",
     "his musical hobby"),
    ("marathon", "Ran the Boston marathon in 3h12", "what was his Boston marathon time",
     "how fast was his long race"),
    ("gym_schedule", "Lifts weights Monday, Wednesday and Friday mornings",
     "when does he lift weights", "which days is his workout"),
    ("car_model", "Drives a grey Subaru Outback", "what car does he drive",
     "which vehicle is his"),
    ("commute", "Cycles to the office, 25 minutes each way", "how does he get to the office",
     "his daily trip to work by bike"),
    ("sleep_schedule", "Asleep by 22:30, up at 5:45", "when does he go to sleep",
     "what time is his bedtime"),
    ("languages", "Fluent in Polish, English and French", "which languages is he fluent in",
     "what tongues can he speak"),
    ("phone_number", "+1 514 555 0199", "what is his phone number",
     "how can I call him on his mobile"),
    ("email_personal", "tomek.nowak@example.org", "what is his email",
     "his mail address for messages"),
    ("passport_expiry", "Passport expires 11 October 2027", "when does his passport expire",
     "until when is his travel document valid"),
    ("next_trip", "Going to Lisbon for a conference on 14 June", "when is the Lisbon trip",
     "where is he travelling soon"),
    ("airline_seat", "Window seat, near the front of the plane",
     "which seat does he want on a plane",
     "where does he like to sit when flying"),
    ("hotel", "Prefers small quiet hotels with a gym", "what hotels does he like",
     "what kind of lodging should I book"),
    ("doctor_name", "Family physician is Dr. Amara Chen", "who is his family physician",
     "his GP"),
    ("medication", "Takes levothyroxine every morning for his thyroid",
     "what medication does he take", "which pills are on his prescription"),
    ("blood_type", "Blood type A positive", "what is his blood type",
     "his group for a transfusion"),
    ("reading_now", "Reading 'Project Hail Mary' by Andy Weir", "what book is he reading",
     "which novel is on his nightstand"),
    ("tv_show", "Watching Severance season two", "what series is he watching",
     "his current television pick"),
    ("editor_choice", "Writes code in VS Code with the Vim plugin", "which code editor does he use",
     "his IDE"),
    ("terminal", "Uses fish shell inside the kitty terminal", "which shell does he use",
     "his command line setup"),
    ("theme_pref", "Dark theme everywhere, Solarized palette", "does he like a dark theme",
     "light or night colours on screen"),
    ("answer_style", "Wants brief answers with code examples first",
     "how should answers be written", "keep replies concise"),
    ("no_emoji", "Never use emoji in messages to him", "should I use emoji",
     "are smileys welcome"),
    ("timezone_pref", "Eastern Time (America/Toronto)", "which time zone is he in",
     "his local clock offset"),
    ("work_hours", "Works 8:00 to 16:00, no meetings after 15:00", "what are his work hours",
     "when is he available during the day"),
    ("standup", "Team standup at 9:15 on Zoom", "when is the team standup",
     "daily sync call"),
    ("project_orion", "Project Orion rewrites the routing service in Rust",
     "what is Project Orion", "the effort to redo the delivery planner"),
    ("orion_deadline", "Orion must ship before 30 September", "when is the Orion deadline",
     "due date for the rewrite"),
    ("database", "Main database is PostgreSQL 16 on RDS", "which database do they use",
     "their relational storage engine"),
    ("deploy_steps", "Deploys via GitLab CI, then Helm upgrades the staging cluster",
     "how do deploys work", "how does code reach production"),
    ("incident_march", "March outage: certificate expired on the load balancer",
     "what caused the March outage", "why did the site go down in spring"),
    ("code_review", "Every merge request needs one approval from a senior",
     "how many approvals does a merge request need", "rules before a PR lands"),
    ("testing_rule", "Unit tests must pass locally before pushing", "what is the testing rule",
     "check the build before committing"),
    ("python_version", "Services use Python 3.12", "which Python version do services use",
     "interpreter release for the backend"),
    ("oncall_week", "On call every fourth week, rotation starts Tuesdays",
     "when is he on call", "pager duty schedule"),
    ("slack_channel", "Team chat lives in #platform-team on Slack", "which Slack channel",
     "where does the group talk"),
    ("budget", "Monthly household budget 5,500 CAD", "what is the monthly budget",
     "how much can the family spend"),
    ("bank", "Banks with Desjardins", "which bank does he use", "his financial institution"),
    ("savings_goal", "Saving 20,000 CAD for a kitchen renovation", "what is he saving for",
     "money put aside for remodeling the house"),
    ("anniversary", "Wedding anniversary on 18 July", "when is the wedding anniversary",
     "the date he and Sofia tied the knot"),
    ("gift_sofia", "Sofia would love a pottery class", "gift idea for Sofia",
     "a present for his spouse"),
    ("school", "Lina attends Ecole Saint-Louis", "which school does Lina attend",
     "where does his child study"),
    ("pediatrician", "Lina's pediatrician is Dr. Okoye", "who is Lina's pediatrician",
     "the children's doctor"),
    ("vacation_pref", "Likes hiking trips in national parks, not beaches",
     "what vacations does he like", "holiday he would enjoy"),
    ("restaurant", "Favourite restaurant is Damas, Syrian food", "what is his favourite restaurant",
     "where should we go for dinner"),
    ("volunteering", "Coaches youth soccer on Saturdays", "does he coach soccer",
     "weekend community activity with kids"),
    ("learning_goal", "Learning Japanese with Duolingo, level N4", "which language is he learning",
     "studying a new tongue"),
    ("news_pref", "No sports news in the morning briefing", "what news to leave out",
     "topics to skip in the daily digest"),
    ("password_rule", "Never store passwords in notes; use Bitwarden",
     "where should passwords go", "how to keep credentials safe"),
    ("approval_calendar", "Allowed to add events to his calendar", "may I add calendar events",
     "permission to book meetings for him"),
    ("approval_payments", "Not allowed to make payments for him", "may I make payments",
     "can the assistant spend money on his behalf"),
    ("last_topic", "Last chat was about refinancing the mortgage", "what was the last chat about",
     "previous conversation subject"),
    ("open_question", "Asked whether to switch from Heroku to Fly.io; not answered yet",
     "is the Heroku question answered", "pending hosting migration decision"),
]


def _distractors() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cities = ["Quebec", "Ottawa", "Halifax", "Calgary", "Vancouver", "Denver", "Austin",
              "Chicago", "Miami", "Seattle", "Porto", "Krakow", "Warsaw", "Berlin", "Lyon"]
    for i, city in enumerate(cities):
        out.append({"key": f"cache:weather:{city.lower()}",
                    "value": {"city": city, "temp_c": 5 + i, "conditions": ["rain", "sun"][i % 2]}})
        out.append({"key": f"cache:route:{city.lower()}",
                    "value": {"to": city, "km": 100 + 37 * i, "mode": "road"}})
    for i in range(40):
        out.append({"key": f"ticket:NW-{1200 + i}",
                    "value": f"Ticket NW-{1200 + i}: {['fix', 'add', 'remove', 'update'][i % 4]} "
                             f"{['retry', 'index', 'endpoint', 'report', 'cache'][i % 5]} in "
                             f"{['billing', 'routing', 'auth', 'search'][i % 4]} service"})
    for i in range(30):
        out.append({"key": f"cache:fx:CAD-{i:02d}", "value": {"pair": f"CAD/X{i:02d}",
                                                               "rate": round(0.5 + i / 7, 3)}})
    return out


def dataset() -> dict[str, Any]:
    """``{"memories": [...], "questions": [...], "paraphrases": [...]}`` (queries with the
    keys that answer them)."""
    memories = [{"key": k, "value": v} for k, v, _, _ in ITEMS] + _distractors()
    return {
        "memories": memories,
        "questions": [{"query": q, "relevant": [k]} for k, _, q, _ in ITEMS],
        "paraphrases": [{"query": p, "relevant": [k]} for k, _, _, p in ITEMS],
    }
