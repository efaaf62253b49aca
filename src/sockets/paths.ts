/** true when `child` is `root` or below it, compared on path segment boundaries (/data2 is not in /data) */
export function isInside(child: string, root: string): boolean {
  if (root === '/') return child.startsWith('/');
  const base = root.endsWith('/') ? root.slice(0, -1) : root;
  return child === base || child.startsWith(`${base}/`);
}
