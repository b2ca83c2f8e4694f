-- opencode's SQLite storage (tables session/message/part; data = the object's JSON without its ids),
-- as `sqlite3 opencode.db .dump` prints it. tests load it into a fresh opencode.db.
BEGIN TRANSACTION;
CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
INSERT INTO "message" VALUES('msg_c01','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189200000,1762189200000,'{"role": "user", "time": {"created": 1762189200000}}');
INSERT INTO "message" VALUES('msg_c02','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189201000,1762189201000,'{"role": "assistant", "time": {"created": 1762189201000}, "modelID": "gpt-5", "providerID": "openai", "mode": "build"}');
INSERT INTO "message" VALUES('msg_d01','ses_3c9d8e7f7ffeEe5Ff6Gg7Hh8',1762185600000,1762185600000,'{"role": "assistant", "time": {"created": 1762185600000}}');
CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL REFERENCES message(id) ON DELETE CASCADE,
  session_id TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
INSERT INTO "part" VALUES('prt_c010','msg_c01','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189200000,1762189200000,'{"type": "text", "text": "roll out the API"}');
INSERT INTO "part" VALUES('prt_c020','msg_c02','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189201000,1762189201000,'{"type": "step-start"}');
INSERT INTO "part" VALUES('prt_c021','msg_c02','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189201001,1762189201001,'{"type": "tool", "callID": "call_c1", "tool": "bash", "state": {"status": "completed", "input": {"command": "docker compose pull api", "description": "step"}, "output": "api Pulled\n", "title": "step", "metadata": {"output": "api Pulled\n", "description": "step", "truncated": false, "exit": 0}, "time": {"start": 1762189202000, "end": 1762189209000}}}');
INSERT INTO "part" VALUES('prt_c022','msg_c02','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189201002,1762189201002,'{"type": "tool", "callID": "call_c2", "tool": "bash", "state": {"status": "completed", "input": {"command": "docker compose up -d api", "description": "step", "timeout": 30000}, "output": "Container api  Recreate\n\n<shell_metadata>\nshell tool terminated command after exceeding timeout 30000 ms. If this command is expected to take longer and is not waiting for interactive input, retry with a larger timeout value in milliseconds.\n</shell_metadata>", "title": "step", "metadata": {"output": "Container api  Recreate\n\n<shell_metadata>\nshell tool terminated command after exceeding timeout 30000 ms. If this command is expected to take longer and is not waiting for interactive input, retry wit", "description": "step", "truncated": false, "exit": null}, "time": {"start": 1762189210000, "end": 1762189240100}}}');
INSERT INTO "part" VALUES('prt_c023','msg_c02','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189201003,1762189201003,'{"type": "tool", "callID": "call_c3", "tool": "bash", "state": {"status": "completed", "input": {"command": "curl -s http://127.0.0.1:9000/ready", "description": "step"}, "output": "{\"ready\":true}", "title": "step", "metadata": {"output": "{\"ready\":true}", "description": "step", "truncated": false, "exit": 0}, "time": {"start": 1762189260000, "end": 1762189260100}}}');
INSERT INTO "part" VALUES('prt_c024','msg_c02','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189201004,1762189201004,'{"type": "tool", "callID": "call_c4", "tool": "bash", "state": {"status": "error", "input": {"command": "docker system prune -af", "description": "step"}, "error": "The user has specifically restricted access to this command, you are not allowed to execute it.", "time": {"start": 1762189270000, "end": 1762189270001}}}');
INSERT INTO "part" VALUES('prt_c025','msg_c02','ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4',1762189201005,1762189201005,'{"type": "tool", "callID": "call_c5", "tool": "bash", "state": {"status": "completed", "input": {"command": "docker compose ps --format json", "description": "step"}, "output": "(no output)", "title": "step", "metadata": {"output": "(no output)", "description": "step", "truncated": false, "exit": 0}, "time": {"start": 1762189280000, "end": 1762189280400}}}');
INSERT INTO "part" VALUES('prt_d011','msg_d01','ses_3c9d8e7f7ffeEe5Ff6Gg7Hh8',1762185600000,1762185600000,'{"type": "tool", "callID": "call_d1", "tool": "bash", "state": {"status": "completed", "input": {"command": "tail -n 5 /var/log/api.log", "description": "step"}, "output": "ok\n", "title": "step", "metadata": {"output": "ok\n", "description": "step", "truncated": false, "exit": 0}, "time": {"start": 1762185601000, "end": 1762185601100}}}');
CREATE TABLE project (id TEXT PRIMARY KEY, worktree TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);
INSERT INTO "project" VALUES('prj9','/srv/api',1762185600000,1762185600000);
CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT NOT NULL REFERENCES project(id) ON DELETE CASCADE,
  workspace_id TEXT, parent_id TEXT, slug TEXT NOT NULL, directory TEXT NOT NULL, path TEXT, title TEXT NOT NULL,
  version TEXT NOT NULL, share_url TEXT, cost REAL NOT NULL DEFAULT 0, time_created INTEGER NOT NULL,
  time_updated INTEGER NOT NULL, time_compacting INTEGER, time_archived INTEGER);
INSERT INTO "session" VALUES('ses_3c9d8e7f6ffeAa1Bb2Cc3Dd4','prj9',NULL,NULL,'slug','/srv/api',NULL,'Roll out the API','1.1.4',NULL,0.0,1762189200000,1762189260000,NULL,NULL);
INSERT INTO "session" VALUES('ses_3c9d8e7f7ffeEe5Ff6Gg7Hh8','prj9',NULL,NULL,'slug','/srv/api',NULL,'Read the logs','1.1.4',NULL,0.0,1762185600000,1762185660000,NULL,NULL);
CREATE TABLE todo (session_id TEXT NOT NULL, content TEXT NOT NULL, status TEXT NOT NULL, priority TEXT NOT NULL,
  position INTEGER NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);
CREATE INDEX message_session_time_created_id_idx ON message(session_id, time_created, id);
CREATE INDEX part_message_id_id_idx ON part(message_id, id);
CREATE INDEX part_session_idx ON part(session_id);
COMMIT;
