"""The pages and the HTTP API (Starlette, Jinja2 templates). Every page but /login needs a token:
the login form's cookie, or `Authorization: Bearer TOKEN`; a student sees only their own sources."""
from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import pathlib
import re
import time

import markdown
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from ..exercise import exercises, get, new_seed
from ..exercise.grade import COLUMNS, SUFFIXES
from .judging import Queue
from .store import Store, best, leaderboard

COOKIE = "workbench_token"
templates = Jinja2Templates(directory=pathlib.Path(__file__).parent / "templates")
templates.env.globals["when"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else ""


def make_app(store: Store, queue: Queue, *, max_upload_kb: int = 256, per_minute: int = 6) -> Starlette:
    readmes: dict[int, str] = {}

    def user(request, instructor: bool = False) -> dict:
        auth = request.headers.get("authorization", "")
        u = store.user(auth[7:].strip() if auth.lower().startswith("bearer ") else request.cookies.get(COOKIE))
        if u is None:
            raise HTTPException(401, "log in with the token your instructor gave you (/login)")
        if instructor and not u["instructor"]:
            raise HTTPException(403, "only the instructor may do this")
        return u

    def page(request, name: str, me: dict, status: int = 200, **context):
        return templates.TemplateResponse(request, name, dict(context, me=me), status_code=status)

    def exercise(n, status: int = 404):
        try:
            return get(n)
        except ValueError as e:
            raise HTTPException(status, str(e))

    def owned(request, me: dict) -> dict:
        sub = store.submission(int(request.path_params["sid"]))
        if sub is None or (sub["user_id"] != me["id"] and not me["instructor"]):
            raise HTTPException(404, f"no submission {request.path_params['sid']} of yours")
        return sub

    async def login(request):
        if request.method == "GET":
            return templates.TemplateResponse(request, "login.html", dict(me=None))
        token = str((await request.form()).get("token", "")).strip()
        if store.user(token) is None:
            return templates.TemplateResponse(request, "login.html", dict(me=None, error="unknown token"), 401)
        resp = RedirectResponse("/", 303)
        resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", max_age=180 * 86400)
        return resp

    async def logout(request):
        resp = RedirectResponse("/login", 303)
        resp.delete_cookie(COOKIE)
        return resp

    async def index(request):
        return page(request, "index.html", user(request), exercises=exercises())

    async def exercise_page(request):
        me, ex = user(request), exercise(request.path_params["n"])
        if ex.number not in readmes:
            readmes[ex.number] = markdown.markdown(ex.readme.read_text(), extensions=["fenced_code", "tables"])
        return page(request, "exercise.html", me, ex=ex, readme=readmes[ex.number],
                    board=leaderboard(store.history(exercise=ex.number)), max_upload_kb=max_upload_kb)

    async def board_json(request):
        user(request)
        board = leaderboard(store.history(exercise=exercise(request.path_params["n"]).number))
        return JSONResponse([dict(rank=i + 1, student=s["student"], submission=s["id"], **{
            k: s["row"].get(k) for k in ("ratio", "gpu", "clocks", "measured_at")}) for i, s in enumerate(board)])

    async def submit(request):
        me = user(request)
        limit = max_upload_kb * 1024
        if int(request.headers.get("content-length") or limit * 2) > limit + 16384:
            raise HTTPException(413, f"a submission is at most {max_upload_kb} KiB")
        recent = store.recent(me["id"], 60)
        if len(recent) >= per_minute:
            wait = max(1, int(60 - (time.time() - min(recent))) + 1)
            raise HTTPException(429, f"at most {per_minute} submissions a minute: try again in {wait} s",
                                headers={"Retry-After": str(wait)})
        async with request.form(max_files=1, max_fields=4, max_part_size=limit + 1) as form:
            ex = exercise(form.get("exercise", ""), 400)
            upload, pasted = form.get("file"), str(form.get("source") or "")
            data = await upload.read(limit + 1) if upload is not None and getattr(upload, "filename", "") else b""
            name = pathlib.PurePath(upload.filename).name if data else (form.get("name") or "pasted.cu")
        data = data or pasted.encode()
        if len(data) > limit:
            raise HTTPException(413, f"the source is over {max_upload_kb} KiB (the limit of a submission)")
        try:
            source = data.decode()
        except UnicodeDecodeError:
            raise HTTPException(400, "the source is not UTF-8 text")
        if not source.strip():
            raise HTTPException(400, "no source: upload a .cu file or paste one")
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(name)).lstrip(".")[-80:]
        if not name.endswith(SUFFIXES):
            raise HTTPException(400, f"the file's name must end in {' or '.join(SUFFIXES)}; got {name!r}")
        sid = store.submit(me["id"], ex.number, name, source, new_seed())
        queue.notify()
        return RedirectResponse(f"/submissions/{sid}", 303)

    async def submission(request):
        me = user(request)
        sub = owned(request, me)
        judged = store.judgment(sub["id"])
        return page(request, "submission.html", me, sub=sub, ex=exercise(sub["exercise"]),
                    lines=judged["lines"] if judged and sub["state"] == "done" else "",
                    ahead=store.ahead(sub["id"]) if sub["state"] == "queued" else 0)

    async def submission_json(request):
        sub = owned(request, user(request))
        judged = store.judgment(sub["id"])
        return JSONResponse(dict(sub, lines=judged["lines"] if judged else None))

    async def events(request):
        """The verdict as it comes: `state` while queued, a `line` per line the checker prints, then
        `done` with the status. The stream starts from the first line on every connection."""
        sid = owned(request, user(request))["id"]

        async def stream():
            sent, said, quiet = 0, None, 0
            while not await request.is_disconnected():
                sub = store.submission(sid)
                live = queue.live.get(sid)
                if sub["state"] == "done":
                    judged = store.judgment(sid)
                    lines = judged["lines"].split("\n") if judged["lines"] else []
                else:
                    lines = list(live or [])
                for line in lines[sent:]:
                    yield "event: line\ndata: " + line.replace("\r", "") + "\n\n"
                quiet = 0 if len(lines) > sent else quiet + 1
                sent = max(sent, len(lines))
                if sub["state"] == "done":
                    yield f"event: done\ndata: {sub['row']['status']}\n\n"
                    return
                state = f"queued: {store.ahead(sid)} ahead" if sub["state"] == "queued" else "judging"
                if state != said:
                    said, quiet = state, 0
                    yield f"event: state\ndata: {state}\n\n"
                elif quiet >= 75:  # a comment every 15 s: the connection is alive while a long check runs
                    quiet = 0
                    yield ": judging\n\n"
                await asyncio.sleep(0.2)
        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def history(request):
        me = user(request)
        who = me
        if "name" in request.path_params:
            user(request, instructor=True)
            who = next((u for u in store.users() if u["name"] == request.path_params["name"]), None)
            if who is None:
                raise HTTPException(404, f"no student {request.path_params['name']!r}")
        return page(request, "history.html", me, who=who, subs=store.history(user_id=who["id"]))

    async def admin(request):
        me = user(request, instructor=True)
        return page(request, "admin.html", me, users=store.users(), counts=store.counts(), exercises=exercises(),
                    judges=[getattr(j, "name", repr(j)) for j in queue.judges], timeout_s=queue.timeout_s,
                    max_upload_kb=max_upload_kb, per_minute=per_minute)

    async def roster(request):
        """Import a roster CSV: the new students' tokens come back as a CSV (name,token), once."""
        user(request, instructor=True)
        async with request.form(max_files=1, max_fields=2) as form:
            f = form.get("roster")
            raw = await f.read() if f is not None and not isinstance(f, str) else str(f or "").encode()
        try:
            added = store.import_roster(raw.decode("utf-8-sig"))
        except (ValueError, UnicodeDecodeError) as e:
            raise HTTPException(400, str(e))
        return _csv([("name", "token")] + added, "tokens.csv")

    async def new_token(request):
        user(request, instructor=True)
        uid = int(request.path_params["uid"])
        name = next((u["name"] for u in store.users() if u["id"] == uid), "")
        try:
            return _csv([("name", "token"), (name, store.new_token(uid))], "token.csv")
        except KeyError:
            raise HTTPException(404, f"no user {uid}")

    async def grades(request):
        """One row per student for an exercise, the columns of `exercise grade`: the submission that
        counts (their fastest timed pass, else their latest pass, else their latest)."""
        user(request, instructor=True)
        ex = exercise(request.path_params["n"])
        subs = store.history(exercise=ex.number)
        rows = [COLUMNS]
        for u in (u for u in store.users() if not u["instructor"]):
            b = best([s for s in subs if s["user_id"] == u["id"]])
            r = dict(verdict="no submission") if b is None else b["row"] or dict(verdict=f"not judged yet ({b['state']})")
            r = dict(r, submission=f"{u['name']}/{b['id']}_{b['name']}" if b else f"{u['name']}/")
            rows.append(tuple(f"{r[c]:.1f}" if c == "seconds" and c in r else r.get(c, "") for c in COLUMNS))
        return _csv(rows, f"grades_{ex.slug}.csv")

    async def rejudge(request):
        user(request, instructor=True)
        sid = int(request.path_params["sid"])
        if not store.requeue(sid):
            raise HTTPException(409, f"submission {sid} is not judged yet (queued or being judged): nothing to re-judge")
        queue.notify()
        return RedirectResponse(f"/submissions/{sid}", 303)

    async def error(request, exc: HTTPException):
        if exc.status_code == 401 and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse("/login", 303)
        if "text/html" not in request.headers.get("accept", ""):
            return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)
        return templates.TemplateResponse(request, "error.html", dict(me=None, status=exc.status_code,
                                                                      message=exc.detail), exc.status_code,
                                          headers=exc.headers)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        queue.start()
        try:
            yield
        finally:
            queue.stop()

    routes = [Route("/login", login, methods=["GET", "POST"]), Route("/logout", logout), Route("/", index),
              Route("/exercises/{n:int}", exercise_page), Route("/exercises/{n:int}/leaderboard.json", board_json),
              Route("/submit", submit, methods=["POST"]), Route("/submissions/{sid:int}", submission),
              Route("/submissions/{sid:int}.json", submission_json), Route("/submissions/{sid:int}/events", events),
              Route("/history", history), Route("/students/{name}", history), Route("/admin", admin),
              Route("/admin/roster", roster, methods=["POST"]), Route("/admin/token/{uid:int}", new_token, methods=["POST"]),
              Route("/admin/grades/{n:int}.csv", grades), Route("/admin/rejudge/{sid:int}", rejudge, methods=["POST"])]
    return Starlette(routes=routes, exception_handlers={HTTPException: error}, lifespan=lifespan)


def _csv(rows, filename: str) -> Response:
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return Response(out.getvalue(), media_type="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"})
