// A real OpenID Connect provider for the single sign-on tests: node's oidc-provider (a certified
// implementation) with its development sign-in pages, configured by the test through a JSON file:
//   node provider.mjs CONFIG.json
//   {"port": 9000, "clients": [{client_id, client_secret, redirect_uris}], "users": {"alice": {"email": ..., "groups": [...]}}}
// The sign-in page takes a user's key as its login (any password) and answers for that user's claims.
// Prints "listening <issuer>" once it accepts connections.
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${config.port}`;

const provider = new Provider(issuer, {
  clients: config.clients.map((client) => ({
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    ...client,
  })),
  claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'], profile: ['name'] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  async findAccount(ctx, id) {
    const user = config.users[id];
    if (!user) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...user }; } };
  },
  pkce: { required: () => true },
  cookies: { keys: ['peermr-test-oidc-provider-cookie-key'] },
  features: { devInteractions: { enabled: true } },
});
// Development interactions warn on every start; the tests know.
provider.on('server_error', (ctx, err) => console.error('server_error', err));

provider.listen(config.port, '127.0.0.1', () => console.log(`listening ${issuer}`));
