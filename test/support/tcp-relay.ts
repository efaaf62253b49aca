import net from 'node:net';

/**
 * A TCP relay on 127.0.0.1 in front of a real server: it passes connections on (`forward`) or
 * holds them without a word (`silent`: a hung server), and counts the connections it accepted.
 */
export interface Relay {
  url: string;
  mode: 'forward' | 'silent';
  accepted: number;
  close(): Promise<void>;
}

export async function relayTo(port: number): Promise<Relay> {
  const sockets = new Set<net.Socket>();
  const relay: Relay = { url: '', mode: 'forward', accepted: 0, close: async () => undefined };
  const server = net.createServer((client) => {
    relay.accepted++;
    sockets.add(client);
    client.on('error', () => undefined);
    if (relay.mode === 'silent') return;
    const upstream = net.connect(port, '127.0.0.1');
    sockets.add(upstream);
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  relay.url = `ldap://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  relay.close = async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return relay;
}
