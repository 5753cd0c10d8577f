// GET /api/models: the configured models, filtered by the caller's role
// (authorization roles.<role>.models), and a configuration serve refuses.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, request, runFawn, makeHome, setupAdmin, setupUser, toYaml } from './lib/server.mjs';
import fs from 'node:fs';
import path from 'node:path';

const MODELS = [
  { name: 'small', display_name: 'Small', model: 'small-1', base_url: 'http://127.0.0.1:9/v1', api_key: 'k' },
  { name: 'big', model: 'big-1', base_url: 'https://models.example/v1', supports_thinking: true },
];

describe('models', () => {
  let srv;
  let admin;
  let user;

  before(async () => {
    srv = await FawnServer.start({
      models: MODELS,
      authorization: { enabled: true, roles: { admin: {}, user: { models: { allow: ['small'] } } } },
    });
    admin = await setupAdmin(srv);
    user = await setupUser(srv, 'model-user');
  });
  after(async () => {
    await srv?.stop();
  });

  it('lists every model to a role allowed all, in configuration order', async () => {
    const r = await request(srv, 'GET', '/api/models', { bearer: admin.token });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.models.map((m) => m.name), ['small', 'big']);
    assert.deepEqual(r.json.models[1], {
      name: 'big', display_name: 'big', model: 'big-1', supports_thinking: true, supports_vision: false,
    });
    assert.ok(!r.text.includes('api_key') && !r.text.includes('"k"'), 'no secrets in the listing');
  });

  it('filters by the role and refuses a model the role may not use', async () => {
    const r = await request(srv, 'GET', '/api/models', { bearer: user.token });
    assert.deepEqual(r.json.models.map((m) => m.name), ['small']);
    const big = await request(srv, 'GET', '/api/models/big', { bearer: user.token });
    assert.equal(big.status, 403, big.text);
    const small = await request(srv, 'GET', '/api/models/small', { bearer: user.token });
    assert.equal(small.status, 200);
    assert.equal(small.json.display_name, 'Small');
    const missing = await request(srv, 'GET', '/api/models/nope', { bearer: user.token });
    assert.equal(missing.status, 404);
    assert.equal((await request(srv, 'GET', '/api/models')).status, 401);
  });

  it('serve refuses a malformed model list, naming the key', async () => {
    const home = makeHome();
    const config = path.join(home, 'config.yaml');
    fs.writeFileSync(config, toYaml({ models: [{ name: 'x', model: 'm', base_url: 'ftp://nope' }] }));
    const r = await runFawn(['serve', '--config', config], { home, timeoutMs: 20000 });
    fs.rmSync(home, { recursive: true, force: true });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /models\[0\]\.base_url/);
  });
});
