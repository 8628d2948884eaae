import socket, sys, threading, time
me=int(sys.argv[1]); n=int(sys.argv[2]); nbytes=int(sys.argv[3]); net=sys.argv[4]; flows=sys.argv[5]  # flows: all|one
port=5599
srv=socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR,1); srv.bind((f"{net}.{me+1}",port)); srv.listen(8)
peers=[p for p in range(n) if p!=me]
if flows=="one": peers=[(me+1)%n]
nrecv = n-1 if flows=="all" else 1
def acc():
    for _ in range(nrecv):
        c,_=srv.accept()
        threading.Thread(target=rd,args=(c,)).start()
got=[]
def rd(c):
    t=0
    while True:
        b=c.recv(1<<20)
        if not b: break
        t+=len(b)
    got.append((t,time.time()))
threading.Thread(target=acc).start()
time.sleep(1.0)
buf=b"x"*(1<<20)
def snd(p):
    s=socket.create_connection((f"{net}.{p+1}",port))
    left=nbytes
    while left>0:
        k=min(left,len(buf)); s.sendall(buf[:k]); left-=k
    s.close()
t0=time.time()
th=[threading.Thread(target=snd,args=(p,)) for p in peers]
[t.start() for t in th]; [t.join() for t in th]
t1=time.time()
while len(got)<nrecv: time.sleep(0.01)
print(me, flows, "send", round(t1-t0,3), "s", round(nbytes*len(peers)*8/(t1-t0)/1e9,3), "Gbit/s")
