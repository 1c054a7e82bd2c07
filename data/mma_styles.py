"""What MMA is asked to play for the band corpus (``data.groove_mma``): its grooves and the GM programs drawn.

**Styles** (``DEFAULT_STYLES``, 30 4/4 grooves of MMA 21.09's stdlib, each rendered once before a build to
check that it gives drums, bass and an accompaniment): rock 50sRock, 60sRock, SoftRock, FolkRock, BasicRock;
pop 8Beat, PopBallad, RockBallad, Ballad; funk / soul BVFunk, DSoul; latin BossaNova, Samba, Salsa, Rhumba,
ChaCha, Mambo, Merengue, Tango; jazz Swing, JazzCombo, BigBand, ModernJazz; country CountrySwing, BlueGrass;
caribbean Ska, Calypso (MMA has no reggae groove); disco BoneyM; blues Blues, ShuffleBoggie.
``WIDE_STYLES`` (``--style-set wide``, 76) adds rock / pop JazzRock, BubbleRock, Twist, Rock128; funk / soul
Strut, LFusion; electronic Trance; ballads GuitarBallad, PianoBallad, Ballad128; blues CountryBlues, SlowBlues,
FastBlues, Blues128; country / folk HillCountry, Folk, WesternSwing, SlowCountry, Zydeco; jazz and swing
EasySwing, FastSwing, Bebop, Dixie, Charleston, Jive, NiteJazz, MellowJazz, SlowJazz, SoftShoe, Foxtrot,
QuickStep, Broadway; latin Beguine, Bolero, SlowBolero, Son, LightTango; Desert; and the variations 8BeatPlus,
SoftRockSus, PopBalladPlus, BossaNovaPlus, SwingPlus, FolkRockPlus, BasicRockSus, 60sRockSus (Plus: an added
arpeggio or solo line; Sus: sustained strings).
"""

LEAD_PROGRAMS = (0, 11, 16, 24, 26, 29, 40, 56, 65, 66, 71, 73, 80, 81)  # GM programs a lead is drawn from:
# piano, vibraphone, organ, nylon and jazz guitar, overdriven guitar, violin, trumpet, alto and tenor sax,
# clarinet, flute, square and saw leads
PIANO_PROGRAMS = (0, 1, 2, 4, 5, 6, 16, 17, 24, 25, 26, 27)  # pianos, electric pianos, clavinet, organs, guitars
DEFAULT_STYLES = (
    "50sRock", "60sRock", "SoftRock", "FolkRock", "BasicRock", "8Beat", "PopBallad", "RockBallad", "Ballad",
    "BVFunk", "DSoul", "BossaNova", "Samba", "Salsa", "Rhumba", "ChaCha", "Mambo", "Merengue", "Tango",
    "Swing", "JazzCombo", "BigBand", "ModernJazz", "CountrySwing", "BlueGrass", "Ska", "Calypso", "BoneyM",
    "Blues", "ShuffleBoggie",
)
WIDE_STYLES = DEFAULT_STYLES + (  # 38 more 4/4 grooves, and 8 variations of default ones (Plus, Sus)
    "JazzRock", "LFusion", "Strut", "Twist", "Jive", "Zydeco", "Trance", "BubbleRock", "CountryBlues", "SlowBlues",
    "FastBlues", "HillCountry", "Folk", "GuitarBallad", "PianoBallad", "EasySwing", "FastSwing", "Bebop", "Dixie",
    "Charleston", "Beguine", "Bolero", "Son", "SoftShoe", "Foxtrot", "QuickStep", "NiteJazz", "MellowJazz", "SlowJazz",
    "WesternSwing", "SlowCountry", "LightTango", "Rock128", "Blues128", "Ballad128", "SlowBolero", "Broadway",
    "Desert", "8BeatPlus", "SoftRockSus", "PopBalladPlus", "BossaNovaPlus", "SwingPlus", "FolkRockPlus",
    "BasicRockSus", "60sRockSus",
)
STYLE_SETS = {"default": DEFAULT_STYLES, "wide": WIDE_STYLES}  # --style-set
GM_FAMILIES = ("Piano", "Chromatic", "Organ", "Guitar", "Keys", "Strings", "Ensemble", "Brass", "Reed", "Pipe",
               "Lead", "Pad", "Effects", "Ethnic", "Tuned", "Sounds")  # name per program // 8, no drum word
