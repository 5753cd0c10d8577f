// What the Node benchmarks share.
import net from 'node:net';

/** A TCP port on 127.0.0.1 that the kernel says is free now. */
export function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}
