#!/usr/bin/env python3
"""Round-trip time of OpenFlow 1.3 FLOW_STATS requests, one at a time.

Usage: scripts/stats-latency.py PORT COUNT   (a switch listening on 127.0.0.1:PORT)

Sends HELLO, then COUNT multipart FLOW requests 10 ms apart, timing each until
its last reply part; prints the median, p90 and max. Used for the statistics
reply figures in BENCHMARKS.md."""
import socket, struct, time, sys
port=int(sys.argv[1]); n=int(sys.argv[2])
s=socket.create_connection(("127.0.0.1",port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def recv_msg():
    h=b''
    while len(h)<8: h+=s.recv(8-len(h))
    v,t,l,x=struct.unpack('!BBHI',h)
    b=b''
    while len(b)<l-8: b+=s.recv(l-8-len(b))
    return t,x,b
s.sendall(struct.pack('!BBHI',4,0,8,1)); recv_msg()
body=struct.pack('!HHxxxx',1,0)+struct.pack('!BxxxIIxxxxQQ',0xff,0xffffffff,0xffffffff,0,0)+struct.pack('!HHxxxx',1,4)
lat=[]
for i in range(n):
    msg=struct.pack('!BBHI',4,18,8+len(body),100+i)+body
    t0=time.perf_counter(); s.sendall(msg)
    while True:
        t,x,b=recv_msg()
        if x==100+i and t==19:
            flags=struct.unpack('!H',b[2:4])[0]
            if flags & 1 == 0: break
    lat.append(time.perf_counter()-t0)
    time.sleep(0.01)
lat.sort()
print(f"flow stats round trip: median {lat[len(lat)//2]*1e6:.0f} us, p90 {lat[int(len(lat)*0.9)]*1e6:.0f} us, max {lat[-1]*1e6:.0f} us")
